package pve

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/tests/pveapi"
)

// double serves the PVE API double (tests/pveapi) with the holders of
// cp-1 and cp-2, protected, on their hosts, and a client trusting it.
func double(t *testing.T) (*pveapi.Server, *httptest.Server, *Client) {
	t.Helper()
	s := pveapi.New(pveapi.Host{Name: "pve-1"}, pveapi.Host{Name: "pve-2"}, pveapi.Host{Name: "pve-3"})
	s.AddToken(pveapi.Token{ID: "milner@pve!t", Secret: "x", ACL: map[string][]string{"/vms": {"VM.Audit", "VM.Allocate", "VM.Config.Options"}}})
	s.AddVM(pveapi.VM{VMID: 1150, Node: "pve-1", Status: "stopped", Config: map[string]string{"name": "milner-prod-cp-1-disks", "protection": "1"}})
	s.AddVM(pveapi.VM{VMID: 1151, Node: "pve-2", Status: "stopped", Config: map[string]string{"name": "milner-prod-cp-2-disks", "protection": "1"}})
	srv := s.Start()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c, err := New(srv.URL, "milner@pve!t=x", false, roots)
	require.NoError(t, err)
	return s, srv, c
}

// puts are the journal's PUT requests.
func puts(s *pveapi.Server) []string {
	var out []string
	for _, e := range s.Journal() {
		if e.Method == http.MethodPut {
			out = append(out, e.Path+" "+e.Form)
		}
	}
	return out
}

// TestUnprotectThenReprotectWhatIsLeft: a teardown clears the flag on
// every holder where it runs (missing ones skipped); after a failure, only
// the holders still alive are protected again.
func TestUnprotectThenReprotectWhatIsLeft(t *testing.T) {
	ctx := context.Background()
	s, srv, c := double(t)
	reprotect, err := c.Unprotect(ctx, []int{1150, 1151, 1152})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"/nodes/pve-1/qemu/1150/config protection=0",
		"/nodes/pve-2/qemu/1151/config protection=0",
	}, puts(s))
	assert.Equal(t, "0", s.VMs()[1150].Config["protection"])

	// The destroy removed 1150 (PVE lets it go now), then failed.
	req, err := http.NewRequest(http.MethodDelete, srv.URL+"/api2/json/nodes/pve-1/qemu/1150", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "PVEAPIToken=milner@pve!t=x")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool { _, ok := s.VMs()[1150]; return !ok }, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, reprotect(ctx))
	assert.Equal(t, "/nodes/pve-2/qemu/1151/config protection=1", puts(s)[2])
	assert.Len(t, puts(s), 3)
	assert.Equal(t, "1", s.VMs()[1151].Config["protection"])
}

// TestErrorsCarryPVEsReason: a refusal names PVE's reason (its status line).
func TestErrorsCarryPVEsReason(t *testing.T) {
	_, _, c := double(t)
	_, err := c.VMConfig(context.Background(), "pve-1", 1152)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "500 Configuration file 'nodes/pve-1/qemu-server/1152.conf' does not exist")
	bad, err := New(c.base.String(), "milner@pve!t=wrong", false, nil)
	require.NoError(t, err)
	bad.http = c.http
	_, err = bad.VMs(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "401 Authentication failed!")
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
