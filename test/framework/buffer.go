package framework

import (
	"bytes"
	"sync"
)

// LockedBuffer is an output buffer a test can read while a command writes to it, and that a
// command's standard output and error can share (exec copies each from a goroutine of its own).
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
