package main

import (
	"fmt"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/stacks/config"
)

// stackSource serves a stack's raw config and its decrypted secrets to
// config.Load, as the program would see them.
type stackSource struct {
	st  *engine.Stack
	cfg map[string]string
}

func (s stackSource) GetConfig(key string) (string, bool) {
	if v, ok := s.st.Secret(key); ok {
		return v, true
	}
	v, ok := s.cfg[key]
	return v, ok
}

func (s stackSource) IsConfigSecret(key string) bool {
	_, ok := s.st.Secret(key)
	return ok
}

func (s stackSource) RootDirectory() string { return s.st.Dir() }

// loadStack reads the stack's config once, through the program's own
// loader (config.Load: strict decode, defaults, every problem at once),
// with its secrets decrypted as the program would see them. raw is the
// stack file's plain config.
func loadStack(st *engine.Stack) (*config.Config, map[string]string, error) {
	raw, err := st.Config()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Load(stackSource{st, raw})
	if err != nil {
		return nil, nil, fmt.Errorf("stack %q: %w", st.Name(), err)
	}
	return cfg, raw, nil
}
