package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/milner/milner/internal/engine"
)

// fakeTeardownStack is a stack whose destroy deletes only the resources
// not in failOn, as a destroy that fails half way does.
type fakeTeardownStack struct {
	resources []engine.Resource
	failOn    map[string]bool
	protected []string // the URNs Protect was called with
}

func (f *fakeTeardownStack) Resources(context.Context) ([]engine.Resource, error) {
	return slices.Clone(f.resources), nil
}

func (f *fakeTeardownStack) UnprotectAll(context.Context) error {
	for i := range f.resources {
		f.resources[i].Protect = false
	}
	return nil
}

func (f *fakeTeardownStack) Protect(_ context.Context, urns []string) error {
	f.protected = append(f.protected, urns...)
	return nil
}

func (f *fakeTeardownStack) Destroy(context.Context) (*engine.Result, error) {
	var left []engine.Resource
	for _, r := range f.resources {
		if f.failOn[r.URN] {
			left = append(left, r)
		}
	}
	f.resources = left
	if len(left) > 0 {
		return nil, errors.New("destroy: libvirt: volume is in use")
	}
	return &engine.Result{}, nil
}

const tdPrefix = "urn:pulumi:dev::milner::milner:components:LibvirtSubstrate$"

func newFakeTeardown(failOn ...string) *fakeTeardownStack {
	f := &fakeTeardownStack{failOn: map[string]bool{}}
	for _, n := range []string{"libvirt:index/pool:Pool::c-pool", "libvirt:index/volume:Volume::c-cp-1-os", "libvirt:index/volume:Volume::c-cp-1-data"} {
		f.resources = append(f.resources, engine.Resource{URN: tdPrefix + n, Type: strings.Split(n, "::")[0], Protect: true})
	}
	f.resources = append(f.resources, engine.Resource{URN: tdPrefix + "libvirt:index/domain:Domain::c-cp-1", Type: "libvirt:index/domain:Domain"})
	for _, n := range failOn {
		f.failOn[tdPrefix+n] = true
	}
	return f
}

func TestTeardownConfirmsTheClusterName(t *testing.T) {
	for _, typed := range []string{"dev\n", "\n", "c \n"} {
		f := newFakeTeardown()
		var out bytes.Buffer
		err := teardown(context.Background(), f, "dev", "c-cluster", "", strings.NewReader(typed), &out)
		if err == nil || !strings.Contains(err.Error(), `is not the cluster name "c-cluster"; nothing was deleted`) {
			t.Errorf("typed %q: err = %v, want a refusal naming the cluster", typed, err)
		}
		if len(f.resources) != 4 || !f.resources[0].Protect {
			t.Errorf("typed %q: the stack was touched: %+v", typed, f.resources)
		}
		if !strings.Contains(out.String(), "Type the cluster name (c-cluster)") {
			t.Errorf("typed %q: prompt does not ask for the cluster name:\n%s", typed, out.String())
		}
	}
	f := newFakeTeardown()
	if err := teardown(context.Background(), f, "dev", "c-cluster", "", strings.NewReader("c-cluster\n"), &bytes.Buffer{}); err != nil {
		t.Fatalf("typed the cluster name: %v", err)
	}
	if len(f.resources) != 0 || len(f.protected) != 0 {
		t.Errorf("a clean teardown left %v and re-protected %v", f.resources, f.protected)
	}
}

func TestFailedTeardownReprotects(t *testing.T) {
	f := newFakeTeardown("libvirt:index/volume:Volume::c-cp-1-data", "libvirt:index/domain:Domain::c-cp-1")
	err := teardown(context.Background(), f, "dev", "c-cluster", "c-cluster", strings.NewReader(""), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "volume is in use") || !strings.Contains(err.Error(), "1 protected resources still in state are protected again") {
		t.Fatalf("err = %v, want the destroy error and the re-protection", err)
	}
	// Only what was protected and is still in state: not the deleted pool and
	// OS volume, not the never-protected domain.
	if want := []string{tdPrefix + "libvirt:index/volume:Volume::c-cp-1-data"}; !slices.Equal(f.protected, want) {
		t.Errorf("re-protected %v, want %v", f.protected, want)
	}
}
