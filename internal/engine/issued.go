package engine

// The record of client certificates milner issues outside an apply
// (`milner kubeconfig|talosconfig --renew`): each is a credential of the
// cluster (the admin kubeconfig's is system:masters, valid a year, with no
// revocation), issued from the secrets bundle in state by whoever holds the
// state and its passphrase. The provider keeps no trace of them, so milner
// writes one object per certificate into the stack's backend, beside its
// state, where every operator of the stack reads them (`milner status`).

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// Issued is one client certificate milner issued.
type Issued struct {
	// Config is the client config it was issued for (kubeconfig, talosconfig).
	Config string `json:"config"`
	// Subject is its common name, Groups its organizations (system:masters, os:admin).
	Subject string   `json:"subject"`
	Groups  []string `json:"groups"`
	// Serial is its serial number (hex), NotAfter when it expires.
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"notAfter"`
	// At is when it was issued, Who (user@host) and Command by whom.
	At      time.Time `json:"at"`
	Who     string    `json:"who"`
	Command string    `json:"command"`
}

// issuedDir is where the records of the stack live in its backend: under
// the bookkeeping directory, beside what the DIY backend keeps there.
func (s *Stack) issuedDir() string {
	return path.Join(".pulumi", "milner", "issued", s.project.Name.String(), s.name)
}

// RecordIssued writes the record of a certificate milner issued, with who
// issued it and when, before the certificate is handed out.
func (s *Stack) RecordIssued(ctx context.Context, rec Issued) error {
	me := s.self()
	rec.At, rec.Who, rec.Command = me.Since, me.Who, me.Command
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	bucket, err := s.openBucket(engineContext(ctx))
	if err != nil {
		return fmt.Errorf("stack %q: record the issued certificate: %w", s.name, err)
	}
	defer func() { _ = bucket.Close() }()
	key := path.Join(s.issuedDir(), rec.At.Format("20060102T150405.000000000Z")+"-"+rec.Serial+".json")
	if err := bucket.WriteAll(engineContext(ctx), key, b, nil); err != nil {
		return fmt.Errorf("stack %q: record the issued certificate: %w", s.name, err)
	}
	return nil
}

// IssuedCertificates lists the records of the stack, oldest first.
func (s *Stack) IssuedCertificates(ctx context.Context) ([]Issued, error) {
	bucket, err := s.openBucket(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = bucket.Close() }()
	var keys []string
	if err := eachKey(ctx, bucket, s.issuedDir()+"/", func(k string) {
		if strings.HasSuffix(k, ".json") {
			keys = append(keys, k)
		}
	}); err != nil {
		return nil, err
	}
	slices.Sort(keys)
	out := make([]Issued, 0, len(keys))
	for _, k := range keys {
		b, err := bucket.ReadAll(ctx, k)
		if err != nil {
			return nil, err
		}
		var rec Issued
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out = append(out, rec)
	}
	return out, nil
}
