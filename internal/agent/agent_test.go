package agent

import (
	"testing"
	"time"
)

// TestLocalMemberBackoff: the waits for the local etcd at start double from 200ms and then stay at
// 5s for as long as the timeout allows, never giving up early at the cap.
func TestLocalMemberBackoff(t *testing.T) {
	next := localMemberBackoff.DelayFunc()
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := next(); got != w {
			t.Errorf("wait %d: %s, want %s", i+1, got, w)
		}
	}
}
