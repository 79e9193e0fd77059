package join

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

func TestRunRefusesBadOptionsBeforeAskingEtcd(t *testing.T) {
	dir := t.TempDir()
	good := Options{
		Name:     "node-4",
		PeerURLs: []string{"http://10.0.0.4:2380"},
		// Nothing listens there: reaching etcd would fail differently and only after the timeout.
		Etcd:    etcd.Config{Endpoints: []string{"http://127.0.0.1:1"}},
		Output:  filepath.Join(dir, "join.env"),
		Timeout: time.Second,
	}
	cases := []struct {
		name   string
		change func(*Options)
		want   []string
	}{
		{"no name", func(o *Options) { o.Name = "" }, []string{"--name is required"}},
		{"no peer URLs", func(o *Options) { o.PeerURLs = nil }, []string{"--peer-urls is required"}},
		{"no port", func(o *Options) { o.PeerURLs = []string{"http://10.0.0.4"} }, []string{`peer URL "http://10.0.0.4" needs an explicit port`}},
		{"no endpoints", func(o *Options) { o.Etcd.Endpoints = nil }, []string{"--etcd-endpoints is required"}},
		{"no timeout", func(o *Options) { o.Timeout = 0 }, []string{"--timeout must be positive"}},
		{"missing directory", func(o *Options) { o.Output = filepath.Join(dir, "nope", "join.env") },
			[]string{"directory " + filepath.Join(dir, "nope") + " does not exist"}},
		{"output is a directory", func(o *Options) { o.Output = dir }, []string{"is a directory"}},
		{"everything at once", func(o *Options) { o.Name, o.PeerURLs, o.Etcd.Endpoints = "", []string{"ftp://x:1"}, nil },
			[]string{"--name is required", `"ftp://x:1": scheme must be http or https`, "--etcd-endpoints is required"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := good
			tc.change(&opts)
			err := Run(context.Background(), opts, io.Discard, io.Discard)
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("got %v, want an error containing %q", err, want)
				}
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "join.env")
	if err := os.WriteFile(path, []byte("OLD=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(path, wantFile); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 even when replacing a 0644 file", info.Mode().Perm())
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != wantFile {
		t.Errorf("got %q, %v", got, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v, %v; want only join.env, no temporary file", entries, err)
	}
}
