package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The snapshot's flags are checked before the stack is read or the
// cluster asked (the Op here has neither: reaching them would panic), and
// every problem is reported at once, each naming its flag.
func TestEtcdSnapshotChecksItsFlagsFirst(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "taken.age")
	require.NoError(t, os.WriteFile(exists, nil, 0o600))
	for name, tc := range map[string]struct {
		in   EtcdSnapshotInput
		want []string
	}{
		"no recipient, no directory":    {EtcdSnapshotInput{Out: filepath.Join(dir, "no", "f.age")}, []string{"--recipient/--recipients-file: at least one age recipient", "--out " + filepath.Join(dir, "no", "f.age") + ": the directory"}},
		"a bad key, a file that exists": {EtcdSnapshotInput{Recipients: []string{"age1nope"}, Out: exists}, []string{`--recipient/--recipients-file: recipient "age1nope"`, "--out " + exists + " exists"}},
		"a missing recipients file":     {EtcdSnapshotInput{RecipientsFiles: []string{filepath.Join(dir, "none.txt")}, Out: dir}, []string{"--recipient/--recipients-file: recipients file"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := EtcdSnapshot(&Op{Ctx: context.Background()}, tc.in)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}
