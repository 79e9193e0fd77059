// Identity: the name this agent process campaigns under. client-go treats a Lease that names its
// own identity as already held, so two processes (a restarted agent while its predecessor may
// still run, or two agents given one --name) must never share one.

package agent

import (
	"crypto/rand"
	"encoding/hex"
)

// newIdentity is name, for people reading the Lease, with a random suffix per process.
func newIdentity(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return name + "_" + hex.EncodeToString(b)
}
