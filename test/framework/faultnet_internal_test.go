package framework

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

var errPastHole = errors.New("read past a hole")

// TestHealResetsBeforeBytesFlow: a connection that lost bytes to a blackhole never carries
// another byte once the blackhole is lifted; it is reset. A stream resumed with a hole corrupts
// what rafthttp decodes from it (see heal). The server counts up in 8-byte words, so any hole the
// client read past would show as a jump.
func TestHealResetsBeforeBytesFlow(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				var word [8]byte
				for i := uint64(0); ; i++ {
					binary.BigEndian.PutUint64(word[:], i)
					if _, err := c.Write(word[:]); err != nil {
						return
					}
					if i%64 == 0 {
						time.Sleep(100 * time.Microsecond)
					}
				}
			}()
		}
	}()
	n := newFaultNet(t, filepath.Join(t.TempDir(), "faults.log"))
	p, addr, err := n.newLink("counter", "127.0.0.1", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	type result struct {
		words uint64
		err   error
	}
	progress := make(chan uint64, 1)
	done := make(chan result, 1)
	go func() {
		var word [8]byte
		for want := uint64(0); ; want++ {
			if _, err := io.ReadFull(c, word[:]); err != nil {
				done <- result{want, err}
				return
			}
			if got := binary.BigEndian.Uint64(word[:]); got != want {
				done <- result{want, errPastHole}
				return
			}
			if want == 1000 {
				progress <- want
			}
		}
	}()
	select {
	case <-progress:
	case r := <-done:
		t.Fatalf("the connection ended before the blackhole, after %d words: %v", r.words, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no words through the link within 10s")
	}
	p.blackhole(rx)
	time.Sleep(300 * time.Millisecond)
	p.heal(rx)
	select {
	case r := <-done:
		if errors.Is(r.err, errPastHole) {
			t.Fatalf("after %d words in order, the client read a word past the blackhole's hole: the connection was not reset before the bytes flowed again", r.words)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection that lived through the blackhole was not reset within 10s of the heal")
	}
}
