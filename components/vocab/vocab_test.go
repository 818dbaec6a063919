package vocab

import "testing"

func TestDiskInterfaceDevices(t *testing.T) {
	for _, tc := range []struct {
		bus           DiskInterface
		first, second string
	}{
		{DiskVirtio, "/dev/vda", "/dev/vdb"},
		{DiskSCSI, "/dev/sda", "/dev/sdb"},
		{DiskSATA, "/dev/sda", "/dev/sdb"},
	} {
		if first, second := tc.bus.Devices(); first != tc.first || second != tc.second {
			t.Errorf("%s: got %s, %s; want %s, %s", tc.bus, first, second, tc.first, tc.second)
		}
		if !tc.bus.Valid() {
			t.Errorf("%s is not valid", tc.bus)
		}
	}
	if DiskInterface("ide").Valid() {
		t.Error("ide must not be a valid node disk interface")
	}
}
