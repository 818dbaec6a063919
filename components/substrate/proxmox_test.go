package substrate

import "testing"

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
