package pve

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeCluster answers /cluster/resources with the guests in vms (JSON as
// PVE documents it) and records every PUT.
type fakeCluster struct {
	mu   sync.Mutex
	vms  string
	puts []string
}

func (f *fakeCluster) server(t *testing.T) *Client {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api2/json/cluster/resources" && r.URL.Query().Get("type") == "vm":
			_, _ = w.Write([]byte(`{"data":` + f.vms + `}`))
		case r.Method == http.MethodPut:
			_ = r.ParseForm()
			f.puts = append(f.puts, r.URL.Path+" "+r.PostForm.Encode())
			_, _ = w.Write([]byte(`{"data":null}`))
		default:
			http.Error(w, "not found", http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c, err := New(srv.URL, "milner@pve!t=x", false, roots)
	require.NoError(t, err)
	return c
}

const holders = `[{"id":"qemu/1150","type":"qemu","node":"pve-1","vmid":1150,"name":"milner-prod-cp-1-disks","status":"stopped","template":0},
 {"id":"qemu/1151","type":"qemu","node":"pve-2","vmid":1151,"name":"milner-prod-cp-2-disks","status":"stopped","template":0}]`

// TestUnprotectThenReprotectWhatIsLeft: a teardown clears the flag on
// every holder where it runs (missing ones skipped); after a failure, only
// the holders still alive are protected again.
func TestUnprotectThenReprotectWhatIsLeft(t *testing.T) {
	ctx := context.Background()
	f := &fakeCluster{vms: holders}
	c := f.server(t)
	reprotect, err := c.Unprotect(ctx, []int{1150, 1151, 1152})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"/api2/json/nodes/pve-1/qemu/1150/config protection=0",
		"/api2/json/nodes/pve-2/qemu/1151/config protection=0",
	}, f.puts)

	// The destroy removed 1150, then failed.
	f.mu.Lock()
	f.vms = `[{"id":"qemu/1151","type":"qemu","node":"pve-2","vmid":1151,"name":"milner-prod-cp-2-disks","status":"stopped","template":0}]`
	f.puts = nil
	f.mu.Unlock()
	require.NoError(t, reprotect(ctx))
	assert.Equal(t, []string{"/api2/json/nodes/pve-2/qemu/1151/config protection=1"}, f.puts)
}

func TestNewRefusesPlainHTTP(t *testing.T) {
	_, err := New("http://pve:8006/", "t", false, nil)
	require.Error(t, err)
}

func TestEffectiveInheritsFromNearestAncestor(t *testing.T) {
	perms := map[string]map[string]int{"/": {"Sys.Audit": 1}, "/vms": {"VM.Audit": 1}, "/vms/150": {"VM.Allocate": 1}}
	assert.Equal(t, 1, effective(perms, "/vms/150")["VM.Allocate"])
	assert.Equal(t, 0, effective(perms, "/vms/150")["VM.Audit"], "a listed path carries its own effective set")
	assert.Equal(t, 1, effective(perms, "/vms/151")["VM.Audit"])
	assert.Equal(t, 1, effective(perms, "/storage/local")["Sys.Audit"])
}
