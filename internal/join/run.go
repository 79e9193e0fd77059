package join

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
)

// Options are the command's flags.
type Options struct {
	Name     string
	PeerURLs []string
	Etcd     etcd.Config
	// Output is the file to write the settings to; empty means stdout.
	Output string
	// Timeout bounds the whole command, retries included.
	Timeout time.Duration
}

// Run checks the options, joins, and writes the settings to opts.Output or stdout. Notes for the
// operator go to stderr.
func Run(ctx context.Context, opts Options, stdout, stderr io.Writer) error {
	req, err := opts.request()
	if err != nil {
		return err
	}
	c, err := etcd.New(opts.Etcd)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	vars, err := Join(ctx, c, req, stderr)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("join did not complete within --timeout %s: %w", opts.Timeout, err)
		}
		return err
	}
	text := Format(vars)
	if opts.Output == "" {
		if _, err := io.WriteString(stdout, text); err != nil {
			return fmt.Errorf("writing the settings to stdout: %w", err)
		}
		return nil
	}
	if err := writeFile(opts.Output, text); err != nil {
		return fmt.Errorf("%w (the member is in etcd: run join again to write its settings)", err)
	}
	return nil
}

// request checks every flag before etcd is asked anything, so that a typo never leaves a member
// behind whose settings cannot be written.
func (o Options) request() (Request, error) {
	var errs []error
	if err := CheckName(o.Name); err != nil {
		errs = append(errs, err)
	}
	urls, err := NormalizePeerURLs(o.PeerURLs)
	if err != nil {
		errs = append(errs, err)
	}
	if len(o.Etcd.Endpoints) == 0 {
		errs = append(errs, errors.New("--etcd-endpoints is required"))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, not %s", o.Timeout))
	}
	if o.Output != "" {
		if err := checkOutput(o.Output); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Request{}, err
	}
	return Request{Name: o.Name, PeerURLs: urls}, nil
}

func checkOutput(path string) error {
	dir := filepath.Dir(path)
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--output %s: directory %s does not exist", path, dir)
	case err != nil:
		return fmt.Errorf("--output %s: %w", path, err)
	case !info.IsDir():
		return fmt.Errorf("--output %s: %s is not a directory", path, dir)
	}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return fmt.Errorf("--output %s is a directory", path)
	}
	return nil
}

// writeFile replaces path by renaming a complete file over it, so that whoever reads it (a unit
// starting etcd) sees the old settings or the new ones, never part of them. The temporary file
// is in the same directory because a rename cannot cross file systems; CreateTemp makes it 0600,
// which the rename keeps, so the cluster's layout is readable by the file's owner only.
func writeFile(path, text string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.WriteString(text); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	// Without it a crash soon after the rename can leave an empty file under the final name.
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
