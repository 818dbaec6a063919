package engine

import "github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"

// Secret returns the decrypted value of one secret key of the stack file
// (full key, e.g. milner:proxmoxApiToken), for the checks milner makes
// outside the program (the Proxmox API reads); false when it is not set.
func (s *Stack) Secret(key string) (string, bool) {
	k, err := config.ParseKey(key)
	if err != nil {
		return "", false
	}
	v, ok := s.plain[k]
	return v, ok
}
