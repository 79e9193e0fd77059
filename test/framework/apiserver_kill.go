package framework

import "syscall"

// Kill sends kube-apiserver SIGKILL and waits for it to exit, as a crash of its node would. Unlike
// Restart's SIGTERM it cannot hang: a graceful stop waits for requests in flight, and with an
// etcd member just killed or removed the apiserver has been seen to wait past the framework's
// stop timeout.
func (a *APIServer) Kill(t TB) {
	t.Helper()
	if err := a.proc.kill(); err != nil {
		t.Fatalf("kill apiserver: %v", err)
	}
}

// Start starts kube-apiserver again after Kill, with the same flags, and waits for /readyz.
func (a *APIServer) Start(t TB) {
	t.Helper()
	a.start(t)
}

// Pause freezes kube-apiserver with SIGSTOP: it keeps its connections and answers nothing, as a
// hung control-plane machine does. Resume continues it.
func (a *APIServer) Pause(t TB) {
	t.Helper()
	if err := a.proc.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("pause apiserver: %v", err)
	}
}

// Resume continues an apiserver frozen by Pause.
func (a *APIServer) Resume(t TB) {
	t.Helper()
	if err := a.proc.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("resume apiserver: %v", err)
	}
}
