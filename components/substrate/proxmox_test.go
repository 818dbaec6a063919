package substrate

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

// TestImageFileName: the name is stable for one URL, and a new URL (another
// schematic) is a new file, never an overwrite of an image in use.
func TestImageFileName(t *testing.T) {
	const a = "https://factory.talos.dev/image/aaaa/v1.9.5/nocloud-amd64.qcow2"
	const b = "https://factory.talos.dev/image/bbbb/v1.9.5/nocloud-amd64.qcow2"
	got := imageFileName("c", "v1.9.5", a)
	if got != imageFileName("c", "v1.9.5", a) {
		t.Fatal("not deterministic")
	}
	if got == imageFileName("c", "v1.9.5", b) {
		t.Errorf("two URLs share the file name %s", got)
	}
	if want := "c-talos-v1.9.5-"; got[:len(want)] != want || got[len(got)-6:] != ".qcow2" {
		t.Errorf("got %s, want c-talos-v1.9.5-<hash>.qcow2", got)
	}
}
