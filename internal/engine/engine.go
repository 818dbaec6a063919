// Package engine runs the Milner program on the real Pulumi engine, inside
// the milner process: the same engine release as the pinned Pulumi CLI
// (pkg/v3, kept equal by TestEngineMatchesCLI), on the same project files,
// stack files, backend and passphrase conventions the user's `pulumi` uses.
//
//   - Project and stack: <Dir>/Pulumi.yaml and <Dir>/Pulumi.<stack>.yaml, the
//     repository's own files; nothing is copied.
//   - Backend: PULUMI_BACKEND_URL, else the project's backend.url, else the
//     CLI's current login (`pulumi login`). Any DIY backend: file://,
//     postgres://, object stores.
//   - Secrets: the passphrase provider, PULUMI_CONFIG_PASSPHRASE or
//     PULUMI_CONFIG_PASSPHRASE_FILE, with the salt in the stack file.
//   - Plugins: pulumi-resource-<name> from Tools (.tools/bin, put first on
//     PATH), then the rest of PATH, then Pulumi's plugin cache
//     (~/.pulumi/plugins); never downloaded (sdk/v3 v3.276.0
//     common/workspace/plugins.go getPluginInfoAndPath: project plugins,
//     $PATH whatever its version, next to the binary, then the cache).
//
// Running the engine in-process spares the CLI's start (≈ 0.3 s an
// operation), derives the passphrase key only when a secret is read, and
// lets `milner up` apply the very plan its gate checked, held in memory.
// Every operation returns the engine's events, folded into steps by the
// gate package, so callers assert on what the engine planned or did.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/internal/redact"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks"
	stackconfig "github.com/milner/milner/stacks/config"
)

// The environment variables of Pulumi's own conventions that Milner reads.
const (
	// BackendEnv selects the backend, as for the Pulumi CLI.
	BackendEnv = "PULUMI_BACKEND_URL"
	// PassphraseEnv is the passphrase of the stack's secrets, as for the CLI.
	PassphraseEnv = "PULUMI_CONFIG_PASSPHRASE"
	// PassphraseFileEnv names a file holding the passphrase, as for the CLI.
	PassphraseFileEnv = "PULUMI_CONFIG_PASSPHRASE_FILE"
)

// NoSecretsPassphrase is the passphrase Milner uses when none is set, and
// only for a stack that can hold no secret: no secret in its stack file and
// nothing past the substrate layer (the Talos layer's secrets bundle is the
// cluster's root of trust). Any other stack must set PassphraseEnv.
const NoSecretsPassphrase = "milner-no-secrets"

// Options says which stack to open and where.
type Options struct {
	// Stack is the stack name; its config is <Dir>/Pulumi.<Stack>.yaml.
	Stack string
	// Dir is the project directory (Pulumi.yaml); default ".".
	Dir string
	// Tools holds the pinned provider plugins; default <Dir>/.tools/bin.
	Tools string
	// Backend is the backend URL; default PULUMI_BACKEND_URL, the project's
	// backend.url, or the CLI's current login.
	Backend string
	// Passphrase overrides PULUMI_CONFIG_PASSPHRASE(_FILE).
	Passphrase string
	// Program is the Pulumi program; default stacks.Program.
	Program pulumi.RunFunc
	// Progress receives Pulumi's own progress output; default os.Stdout.
	// io.Discard silences it.
	Progress io.Writer
	// Interrupts is the caller's signal handling: its Terminate, closed,
	// terminates a running engine operation (cancelling an operation's ctx
	// only asks the engine to cancel gracefully: interrupt.go), and each
	// operation is marked with its Operation. Nil: never terminated.
	Interrupts Interrupts
	// Command names the milner command, recorded with Milner's lock.
	Command string
	// Display is how each operation is shown and recorded (display.go).
	Display Display
}

// Stack is an opened stack: its project, stack file, backend and secrets.
type Stack struct {
	name     string
	dir      string
	file     string
	tools    string
	url      string
	shown    string // url, redacted
	pass     string
	program  pulumi.RunFunc
	progress io.Writer
	stop     Interrupts
	command  string
	display  Display
	// eventsKept: an operation of this Stack wrote the --event-log file.
	eventsKept bool
	project    *workspace.Project
	backend    backend.Backend
	ref        backend.StackReference
	check      *lockCheck // the lock every state write checks (lockcheck.go)
	// keys are the stack file's passphrase managers by salt: Secret derives
	// the key (PBKDF2, slow by design) once per run, not once per value.
	keys   map[string]*lazyManager
	keysMu sync.Mutex
	// held is Milner's lock while this Stack holds it (Lock): depth counts
	// the holders in this process, release frees it at the last.
	held struct {
		sync.Mutex
		depth   int
		release func()
	}
}

// stackName is what Milner accepts as a stack name: a file name that
// cannot leave the project directory (Pulumi.<stack>.yaml).
var stackName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)

// Open resolves the stack's project, stack file, backend and passphrase. It
// runs no operation and changes nothing; the stack is created in the
// backend by the first operation that needs it.
func Open(ctx context.Context, o Options) (*Stack, error) {
	if !stackName.MatchString(o.Stack) || strings.Contains(o.Stack, "..") {
		return nil, fmt.Errorf("stack %q: not a stack name (letters, digits, '.', '_', '-')", o.Stack)
	}
	if o.Dir == "" {
		o.Dir = "."
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.Stack, err)
	}
	if o.Tools == "" {
		o.Tools = filepath.Join(dir, ".tools", "bin")
	}
	if o.Program == nil {
		o.Program = stacks.Program
	}
	if o.Progress == nil {
		o.Progress = os.Stdout
	}
	pluginsStopOnInterrupt()
	project, err := workspace.LoadProject(filepath.Join(dir, "Pulumi.yaml"))
	if err != nil {
		return nil, fmt.Errorf("stack %q: project: %w", o.Stack, err)
	}
	s := &Stack{
		name: o.Stack, dir: dir, file: stackfile.Path(dir, o.Stack), tools: o.Tools,
		program: o.Program, progress: o.Progress, stop: o.Interrupts, command: o.Command, display: o.Display, project: project,
	}
	ps, err := s.stackFile()
	if err != nil {
		return nil, err
	}
	if s.pass, err = passphrase(o, ps); err != nil {
		return nil, err
	}
	if s.url, err = backendURL(o.Backend, project); err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.Stack, err)
	}
	s.shown = redact.URL(s.url)
	if err := privateStateDir(s.url); err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.Stack, err)
	}
	s.check = &lockCheck{stack: o.Stack}
	if s.backend, err = diy.New(ctx, cmdutil.Diag(), checkedURL(s.url, s.check), project); err != nil {
		return nil, fmt.Errorf("stack %q: backend %s: %w", o.Stack, s.shown, err)
	}
	if s.ref, err = s.backend.ParseStackReference(o.Stack); err != nil {
		return nil, fmt.Errorf("stack %q: %w", o.Stack, err)
	}
	return s, nil
}

// Name is the stack name.
func (s *Stack) Name() string { return s.name }

// File is the stack file, <Dir>/Pulumi.<stack>.yaml.
func (s *Stack) File() string { return s.file }

// Backend is the backend URL the stack's state lives in, its credentials
// masked where they stand (redact.URL): what Milner prints.
func (s *Stack) Backend() string { return s.shown }

// stackFile reads the stack file. Milner runs only committed stacks: a
// missing file is an error, never an empty stack.
func (s *Stack) stackFile() (*workspace.ProjectStack, error) {
	if _, err := os.Stat(s.file); err != nil {
		return nil, fmt.Errorf("stack %q: no stack file %s: %w", s.name, s.file, err)
	}
	ps, err := stackfile.Load(string(s.project.Name), s.file)
	if err != nil {
		return nil, fmt.Errorf("stack %q: %w", s.name, err)
	}
	if ps.Environment != nil {
		return nil, fmt.Errorf("stack %q: %s: %w", s.name, s.file, ErrEnvironment)
	}
	return ps, nil
}

// Load loads the stack's config through the one loader (stackfile.Read)
// with its secrets decrypted, as the program sees them: for milner's
// pipeline and the APIs it talks to. The passphrase key is derived on the
// first secret only.
func (s *Stack) Load() (*stackfile.Stack, error) {
	return stackfile.Read(s.file, func(salt string) config.Decrypter { return s.manager(salt).Decrypter() })
}

// manager is the stack's passphrase secrets manager for salt, one per run:
// its key (PBKDF2, slow by design) is derived once, on first use.
func (s *Stack) manager(salt string) *lazyManager {
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	m, ok := s.keys[salt]
	if !ok {
		m = lazyPassphrase(s.pass, salt)
		s.keys = map[string]*lazyManager{salt: m}
	}
	return m
}

// MinPassphraseLen is the shortest passphrase a stack that can hold
// secrets takes, counted in characters after trimming: NIST SP 800-63B
// §5.1.1.1's minimum for a memorized secret. `milner secrets generate`
// writes a far longer one.
const MinPassphraseLen = 8

// passphrase picks the stack's passphrase: Options, PULUMI_CONFIG_PASSPHRASE,
// PULUMI_CONFIG_PASSPHRASE_FILE, then NoSecretsPassphrase for a stack that
// can hold no secret. A stack that can hold secrets refuses a passphrase
// that protects nothing (weakPassphrase) and a file others could read or
// replace (passphraseFile).
func passphrase(o Options, ps *workspace.ProjectStack) (string, error) {
	why := holdsSecrets(ps)
	weak := func(p, from string) (string, error) {
		if why == "" {
			return p, nil
		}
		if problem := weakPassphrase(p); problem != "" {
			return "", fmt.Errorf("stack %q: %s %s, but %s: set a passphrase of its own", o.Stack, from, problem, why)
		}
		return p, nil
	}
	if o.Passphrase != "" {
		return weak(o.Passphrase, "the passphrase")
	}
	if p, ok := os.LookupEnv(PassphraseEnv); ok {
		return weak(p, PassphraseEnv)
	}
	if f := os.Getenv(PassphraseFileEnv); f != "" {
		b, err := passphraseFile(f, why != "")
		if err != nil {
			return "", fmt.Errorf("stack %q: %s %s: %w", o.Stack, PassphraseFileEnv, f, err)
		}
		return weak(strings.TrimRight(string(b), "\r\n"), PassphraseFileEnv+" "+f)
	}
	if why != "" {
		return "", fmt.Errorf("stack %q: set %s or %s: %s", o.Stack, PassphraseEnv, PassphraseFileEnv, why)
	}
	return NoSecretsPassphrase, nil
}

// weakPassphrase says why p protects nothing, or "": judged on p trimmed
// of surrounding white space (what a person can tell apart), it is empty,
// the public NoSecretsPassphrase (it is in this source), or shorter than
// MinPassphraseLen characters.
func weakPassphrase(p string) string {
	t := strings.TrimSpace(p)
	switch {
	case t == "":
		return "is empty or white space"
	case t == NoSecretsPassphrase:
		return fmt.Sprintf("is the public %q", NoSecretsPassphrase)
	case utf8.RuneCountInString(t) < MinPassphraseLen:
		return fmt.Sprintf("is shorter than %d characters", MinPassphraseLen)
	}
	return ""
}

// passphraseFile reads the passphrase file. It opens the file first and
// checks what it opened (fstat of the descriptor, not a stat of the path:
// the path cannot be swapped between the check and the read). With strict
// (the stack can hold secrets) the file must be a regular file of the
// current user, readable by no one else, in a directory no one else can
// write to (who can write the directory can replace the file); a sticky
// directory (/tmp) lets others create files but not replace this one.
func passphraseFile(path string, strict bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if strict {
		if err := privateFile(path, fi); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, 64<<10))
}

// privateFile is passphraseFile's strict check of the opened file fi at path.
func privateFile(path string, fi os.FileInfo) error {
	uid := os.Getuid()
	switch st, _ := fi.Sys().(*syscall.Stat_t); {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("is not a regular file")
	case st != nil && int(st.Uid) != uid:
		return fmt.Errorf("is owned by uid %d, not by the user running milner (uid %d): chown it or use a file of your own", st.Uid, uid)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("is readable by others (mode %04o): chmod 600 %s", fi.Mode().Perm(), path)
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return err
	}
	dst, _ := di.Sys().(*syscall.Stat_t)
	switch {
	case dst != nil && int(dst.Uid) != uid && dst.Uid != 0:
		return fmt.Errorf("is in %s, owned by uid %d, who can replace it: keep it in a directory of your own", dir, dst.Uid)
	case di.Mode().Perm()&0o022 != 0 && di.Mode()&os.ModeSticky == 0:
		return fmt.Errorf("is in %s, writable by others (mode %04o), who can replace it: chmod go-w %s or move the file", dir, di.Mode().Perm(), dir)
	}
	return nil
}

// holdsSecrets says why a stack may hold secrets, or "" when it cannot.
func holdsSecrets(ps *workspace.ProjectStack) string {
	for k, v := range ps.Config {
		if v.Secure() {
			return fmt.Sprintf("its stack file holds the secret %s", k)
		}
	}
	stop := config.MustMakeKey(stackconfig.Namespace, "stopAfter")
	if v, ok := ps.Config[stop]; ok {
		if raw, err := v.Value(config.NopDecrypter); err == nil && raw == string(stackconfig.LayerSubstrate) {
			return ""
		}
	}
	return "it declares the Talos layer, whose secrets bundle lives in state"
}

// backendURL resolves the backend as the CLI does: the explicit URL,
// PULUMI_BACKEND_URL, the project's backend.url, the current login.
func backendURL(explicit string, project *workspace.Project) (string, error) {
	url := explicit
	if url == "" {
		url = os.Getenv(BackendEnv)
	}
	if url == "" && project.Backend != nil {
		url = project.Backend.URL
	}
	if url == "" {
		if creds, err := workspace.GetStoredCredentials(); err == nil {
			url = creds.Current
		}
	}
	// Before anything can print it: its password is masked by value
	// wherever it stands, however a message cuts the URL.
	redact.URLCredentials(url)
	switch {
	case url == "":
		return "", fmt.Errorf("no Pulumi backend: set %s or run `pulumi login` (file://~ for a local file backend, postgres://... for a team)", BackendEnv)
	case !parses(url):
		// Neither the URL nor the parser's error is echoed: a password with
		// an unescaped '/' makes the parser read part of it as a port, and
		// its error quotes that part.
		scheme, _, _ := strings.Cut(url, "://")
		return "", fmt.Errorf("backend URL (%s://..., not shown: it may hold a password) does not parse as a URL: percent-encode the reserved characters of its user name and password ('/' as %%2F, '@' as %%40, ':' as %%3A, '?' as %%3F, '#' as %%23, '%%' as %%25, a blank as %%20)", scheme)
	case !diy.IsDIYBackendURL(url):
		return "", fmt.Errorf("backend %q: Milner runs on self-managed (DIY) backends: file://, postgres://, s3://, gs://, azblob://", redact.URL(url))
	}
	return url, nil
}

// parses reports whether raw is a URL net/url reads with its host where
// it was written: the DIY backend and lib/pq parse it so.
func parses(raw string) bool {
	_, err := neturl.Parse(raw)
	return err == nil && strings.Contains(raw, "://")
}

// privateStateDir keeps a file backend's state directory private: it holds
// every secret output of the stack (encrypted) and its history. Created 0700,
// tightened to 0700 when it exists; a symlink there is refused, not followed.
func privateStateDir(url string) error {
	if !strings.HasPrefix(url, "file://") {
		return nil
	}
	path, err := fileStateDir(url)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	state := filepath.Join(path, ".pulumi")
	fi, err := os.Lstat(state)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.Mkdir(state, 0o700)
	case err != nil:
		return fmt.Errorf("state directory: %w", err)
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("state directory %s is a symlink; Milner does not follow it", state)
	case fi.Mode().Perm() != 0o700:
		return os.Chmod(state, 0o700)
	}
	return nil
}

// fileStateDir is the directory of a file:// backend URL (~ expanded, query
// dropped).
func fileStateDir(url string) (string, error) {
	path := strings.TrimPrefix(url, "file://")
	if rest, home := strings.CutPrefix(path, "~"); home {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		path = h + rest
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return path, nil
}
