package framework

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// allocated holds every loopback address handed out by this process. Addresses
// are never returned to the pool: a moved or removed etcd member's old address
// can still be in the cluster's records, and reusing it for another process
// would make a stale peer URL silently reach the wrong member.
var allocated = struct {
	sync.Mutex
	ips map[string]bool
}{ips: map[string]bool{}}

// allocateIP picks a random unused address in 127.0.0.0/8 (never 127.0.0.1)
// on which every given port is free right now. Test binaries of other packages
// run in parallel and share the loopback network, so a free port is checked by
// actually binding it rather than trusting the in-process set alone; with 2^24
// candidates the window between the check and the real bind is harmless.
func allocateIP(ports ...int) (string, error) {
	return reserveIP(func(ip string) error { return portsFree(ip, ports) })
}

// reserveIP draws random loopback addresses not handed out yet until take accepts one, and
// reserves that one for good.
func reserveIP(take func(ip string) error) (string, error) {
	allocated.Lock()
	defer allocated.Unlock()
	const attempts = 100
	var lastErr error
	for range attempts {
		ip := net.IPv4(127, byte(1+rand.IntN(254)), byte(rand.IntN(256)), byte(1+rand.IntN(254))).String()
		if allocated.ips[ip] {
			continue
		}
		if err := take(ip); err != nil {
			lastErr = err
			continue
		}
		allocated.ips[ip] = true
		return ip, nil
	}
	return "", fmt.Errorf("no free loopback address after %d attempts: %w", attempts, lastErr)
}

func portsFree(ip string, ports []int) error {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close() // nothing was accepted, so nothing to lose
		}
	}()
	for _, port := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("bind %s:%d: %w", ip, port, err)
		}
		listeners = append(listeners, l)
	}
	return nil
}

// ListenLoopback listens on port of a fresh loopback address from the pool the members and
// apiservers draw from, so that no later member or apiserver of this test binary (parallel tests
// included) is given that address, even once the listener is closed: a test can take an address
// where nothing will ever listen, or stand in for a VIP.
func ListenLoopback(t TB, port int) net.Listener {
	t.Helper()
	var l net.Listener
	_, err := reserveIP(func(ip string) error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		return err
	})
	if err != nil {
		t.Fatalf("listening on port %d: %v", port, err)
	}
	return l
}
