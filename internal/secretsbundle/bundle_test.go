package secretsbundle

import (
	"bytes"
	"encoding/base64"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// stateOf renders a bundle as the Talos provider stores it in state
// (terraform-provider-talos secretsBundleTomachineSecrets: certificates
// and keys as base64 of their PEM bytes), with the Pulumi schema's names.
func stateOf(b *secrets.Bundle) map[string]any {
	b64 := base64.StdEncoding.EncodeToString
	pair := func(c []byte, k []byte) map[string]any { return map[string]any{"cert": b64(c), "key": b64(k)} }
	return map[string]any{
		"cluster":    map[string]any{"id": b.Cluster.ID, "secret": b.Cluster.Secret},
		"secrets":    map[string]any{"bootstrapToken": b.Secrets.BootstrapToken, "secretboxEncryptionSecret": b.Secrets.SecretboxEncryptionSecret},
		"trustdinfo": map[string]any{"token": b.TrustdInfo.Token},
		"certs": map[string]any{
			"etcd":              pair(b.Certs.Etcd.Crt, b.Certs.Etcd.Key),
			"k8s":               pair(b.Certs.K8s.Crt, b.Certs.K8s.Key),
			"k8sAggregator":     pair(b.Certs.K8sAggregator.Crt, b.Certs.K8sAggregator.Key),
			"k8sServiceaccount": map[string]any{"key": b64(b.Certs.K8sServiceAccount.Key)},
			"os":                pair(b.Certs.OS.Crt, b.Certs.OS.Key),
		},
	}
}

// TestExportImportRoundTrip: a bundle Talos' machinery generates, stored
// as the provider stores it, exported, encrypted, decrypted and read back
// the way the provider's import reads it, is the same bundle: every CA
// key survives.
func TestExportImportRoundTrip(t *testing.T) {
	contract, err := config.ParseContractFromVersion("v1.9.5")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromState(stateOf(orig))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := age.GenerateX25519Identity()
	sealed, err := Encrypt(plain, []string{id.Recipient().String(), other.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(sealed), "-----BEGIN AGE ENCRYPTED FILE-----") {
		t.Errorf("not armored: %.40q", sealed)
	}
	if bytes.Contains(sealed, []byte(orig.Cluster.Secret)) || bytes.Contains(sealed, orig.Certs.OS.Key) {
		t.Fatal("the sealed file holds a secret in the clear")
	}
	opened, err := Decrypt(sealed, strings.NewReader("# created: test\n"+other.String()+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(opened)
	if err != nil {
		t.Fatal(err)
	}
	orig.Clock = nil
	if !reflect.DeepEqual(got, orig) {
		t.Errorf("bundle changed on the way:\n got %+v\nwant %+v", got, orig)
	}
	// And machinery itself loads the file the provider's import is given.
	if _, err := secrets.LoadBundle(writeTemp(t, opened)); err != nil {
		t.Errorf("machinery LoadBundle: %v", err)
	}

	stranger, _ := age.GenerateX25519Identity()
	if _, err := Decrypt(sealed, strings.NewReader(stranger.String())); err == nil {
		t.Error("a key that is no recipient decrypted the bundle")
	}
}

func TestFromStateNamesWhatIsMissing(t *testing.T) {
	contract, _ := config.ParseContractFromVersion("v1.9.5")
	orig, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	if err != nil {
		t.Fatal(err)
	}
	st := stateOf(orig)
	delete(st["certs"].(map[string]any), "os")
	st["cluster"].(map[string]any)["secret"] = ""
	_, err = FromState(st)
	if err == nil || !strings.Contains(err.Error(), "cluster.secret") || !strings.Contains(err.Error(), "certs.os.key") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseRefusesAnIncompleteBundle(t *testing.T) {
	for _, bad := range []string{"", "cluster: {id: x}\n", "cluster: {id: x, secret: y}\nsecrets: {}\ntrustdinfo: {}\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestEncryptNeedsARecipient(t *testing.T) {
	if _, err := Encrypt([]byte("x"), nil); err == nil {
		t.Error("encrypted for nobody")
	}
	if _, err := Encrypt([]byte("x"), []string{"not-a-key"}); err == nil {
		t.Error("accepted a malformed recipient")
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	f := t.TempDir() + "/secrets.yaml"
	if err := writeFile(f, b); err != nil {
		t.Fatal(err)
	}
	return f
}

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o600) }
