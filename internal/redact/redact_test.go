package redact

import (
	"bytes"
	"testing"
)

// TestText: each case is a credential in a spelling no other case covers,
// masked where it stands; what is not a credential is kept byte for byte.
func TestText(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"backend password",
			"backend postgres://milner:s3cret@db:5432/state?sslmode=disable",
			"backend postgres://milner:xxxxx@db:5432/state?sslmode=disable"},
		{"password equal to the stack name: the rest keeps the word",
			"stack \"dev\": postgres://milner:dev@db/state: run milner adopt --stack dev --node dev-cp-3",
			"stack \"dev\": postgres://milner:xxxxx@db/state: run milner adopt --stack dev --node dev-cp-3"},
		{"percent-encoded password",
			"postgres://milner:p%40ss%2Fw@db/state",
			"postgres://milner:xxxxx@db/state"},
		{"password holding an @",
			"postgres://milner:a@b@db/state",
			"postgres://milner:xxxxx@db/state"},
		{"credential query parameters, the others as written",
			"postgres://db/state?sslmode=verify-full&password=hunter2&sslpassword=k3y&application_name=milner%2Fdev",
			"postgres://db/state?sslmode=verify-full&password=xxxxx&sslpassword=xxxxx&application_name=milner%2Fdev"},
		{"object store keys",
			"s3://state?region=eu-1&awssdk=v2&access_key_id=AK1&secret_access_key=SK2",
			"s3://state?region=eu-1&awssdk=v2&access_key_id=xxxxx&secret_access_key=xxxxx"},
		{"a signed URL's signature",
			"https://store.example/b/o?X-Amz-Signature=abcdef&X-Amz-Expires=60",
			"https://store.example/b/o?X-Amz-Signature=xxxxx&X-Amz-Expires=60"},
		{"token as a chart repository's user name",
			"chart repository https://ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@charts.example/stable: 401",
			"chart repository https://xxxxx@charts.example/stable: 401"},
		{"any user name alone on https (a forge token)",
			"forge https://d3adbeef@git.example/org/repo.git",
			"forge https://xxxxx@git.example/org/repo.git"},
		{"mirror with user and password",
			"mirror https://ci:t0ken@mirror.example/charts/vault-0.30.1.tgz",
			"mirror https://ci:xxxxx@mirror.example/charts/vault-0.30.1.tgz"},
		{"token-shaped user with a password",
			"https://glpat-bbbbbbbbbbbbbbbbbbbbbbbb:x@gitlab.example/",
			"https://xxxxx:xxxxx@gitlab.example/"},
		{"a database role alone is no credential",
			"postgres://milner@db/state",
			"postgres://milner@db/state"},
		{"an ssh user and a key file's path are no credential",
			"qemu+ssh://root@hv1/system?keyfile=/root/.ssh/id",
			"qemu+ssh://root@hv1/system?keyfile=/root/.ssh/id"},
		{"a URL in quotes, in JSON",
			`{"backend": "postgres://u:pw@db/s", "stack": "pw"}`,
			`{"backend": "postgres://u:xxxxx@db/s", "stack": "pw"}`},
		{"connection string password",
			"pq: host=db user=milner password='a b\\'c' dbname=state",
			"pq: host=db user=milner password=xxxxx dbname=state"},
		{"a token outside any URL",
			"vault said: invalid token hvs.CAESIAAAAAAAAAAAAAAAAAAAAAAAAAA",
			"vault said: invalid token xxxxx"},
		{"no credential at all",
			"milner up: 3 to create; run milner preview --stack dev",
			"milner up: 3 to create; run milner preview --stack dev"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Text(c.in); got != c.want {
				t.Errorf("Text(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
}

// TestWriterMasksEachWrite: what is written through Writer reaches the
// underlying writer masked, and the count is of the bytes given.
func TestWriterMasksEachWrite(t *testing.T) {
	var out bytes.Buffer
	w := Writer(&out)
	in := "backend postgres://milner:dev@db/state\n"
	n, err := w.Write([]byte(in))
	if err != nil || n != len(in) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(in))
	}
	if got, want := out.String(), "backend postgres://milner:xxxxx@db/state\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestBackendPasswordMaskedWhateverItsCharacters: the backend URL's
// password, registered by value (URLCredentials), is masked in every
// spelling wherever it stands as a word of its own, even where the text
// around it is no URL the pattern can find: a password holding '(', ')' or
// a quote ends a URL in a message, and one holding an unescaped '/' does
// not parse (the error echoes a piece of it).
func TestBackendPasswordMaskedWhateverItsCharacters(t *testing.T) {
	for _, c := range []struct{ name, url, in, want string }{
		{"a parenthesis ends the URL in a message",
			"postgres://milner:pa(ss)w0rd@db/state",
			`backend postgres://milner:pa(ss)w0rd@db/state: dial tcp: connection refused`,
			`backend postgres://milner:xxxxx@db/state: dial tcp: connection refused`},
		{"a quote ends the URL in a message",
			"postgres://milner:it's@db/state",
			`open "postgres://milner:it's@db/state": refused`,
			`open "postgres://milner:xxxxx@db/state": refused`},
		{"an unescaped slash (the URL does not parse)",
			"postgres://milner:pa/ss@db/state",
			`lock: dial postgres://milner:pa/ss@db/state: refused`,
			`lock: dial postgres://milner:xxxxx@db/state: refused`},
		{"written escaped, printed unescaped",
			"postgres://milner:p%28w%29d@db/state",
			`pq: password p(w)d rejected; url postgres://milner:p%28w%29d@db/state`,
			`pq: password xxxxx rejected; url postgres://milner:xxxxx@db/state`},
		{"written raw, printed escaped",
			"postgres://milner:p w@db/state",
			`url postgres://milner:p%20w@db/state`,
			`url postgres://milner:xxxxx@db/state`},
		{"a password query parameter",
			"postgres://db/state?password=hunt(er)2",
			`conn "host=db password=hunt(er)2"`,
			`conn "host=db password=xxxxx"`},
		{"inside a longer word it is another word",
			"postgres://milner_it:milner_it@db/milner_it",
			`table milner_it_lklost: role milner_it`,
			`table milner_it_lklost: role xxxxx`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { literals.list = nil })
			URLCredentials(c.url)
			if got := Text(c.in); got != c.want {
				t.Errorf("Text(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
}
