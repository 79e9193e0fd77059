package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
	"github.com/etcdmember/kubectl-etcdmember/internal/etcd"
	"github.com/etcdmember/kubectl-etcdmember/internal/events"
	"github.com/etcdmember/kubectl-etcdmember/internal/status"
)

// outputTail is how much of the command's output its Event keeps: the end, where the errors
// are, short enough for the note to stay within the Event's 1 KiB.
const outputTail = 896

// waitDelay bounds the wait for the command's output once it has exited or been killed: a child
// it left running in the background would otherwise hold the pipe, and the registrar, forever.
const waitDelay = 2 * time.Second

// OnRemovedHook is a shell command run once after the local member was removed on request.
type OnRemovedHook struct {
	// Command is run with /bin/sh -c; empty turns the hook off.
	Command string
	Timeout time.Duration
}

// afterRemoval runs the on-removed command once the object of the member last registered here
// says that member was removed on request, and another member of the cluster confirms that it is
// gone from etcd. It needs no local etcd: that shuts itself down once removed, which is why the
// sync that calls this has failed.
func (r *Registrar) afterRemoval(ctx context.Context, etcdErr error) error {
	last := r.last
	if r.OnRemoved.Command == "" || last.object == "" {
		return nil
	}
	// The local etcd answers as another member: the node was set up anew, and a command meant to
	// clean up after the old member must not run under the new one.
	var notMember notMemberError
	if errors.As(etcdErr, &notMember) && notMember.id != last.id {
		return nil
	}
	obj := &v1alpha1.EtcdMember{}
	if err := r.get(ctx, last.object, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading EtcdMember %s: %w", last.object, err)
	}
	id := etcd.IDString(last.id)
	if beingDeleted(ctx, obj) || !hookDue(obj, id) {
		return nil
	}
	ask := r.ask
	if ask == nil {
		ask = r.askMember
	}
	if err := confirmRemoved(ctx, last, ask); err != nil {
		logf.FromContext(ctx).Info("Not running the on-removed command: etcd has not confirmed that the local member is gone; asking again at the next sync",
			"object", obj.Name, "memberID", id, "reason", err.Error())
		return nil
	}
	if err := r.markRan(ctx, obj, id); err != nil {
		return err
	}
	r.OnRemoved.runAndRecord(ctx, r.Events, obj, id)
	return nil
}

// memberAsker reads the member list from one member, with the header of the answer.
type memberAsker func(ctx context.Context, m etcd.Member) ([]etcd.Member, etcd.Header, error)

// confirmRemoved returns nil only when another member of the cluster, as the last successful
// sync listed them, answers a linearizable member list without the local member. The object is
// no such evidence: whoever may write its status can write Joined=False/Removed, and the command
// stops services and moves data away. An answer counts only from this cluster and not from the
// local member itself (a client URL that now lands on it); the first one that counts decides,
// since a linearizable read is the cluster's answer, not the member's.
func confirmRemoved(ctx context.Context, last registration, ask memberAsker) error {
	if len(last.others) == 0 {
		return errors.New("the last successful sync knew no other member to ask")
	}
	var errs []error
	for _, m := range last.others {
		members, header, err := ask(ctx, m)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("member %s at %v: %w", etcd.IDString(m.ID), m.ClientURLs, err))
			continue
		case header.MemberID == last.id:
			errs = append(errs, fmt.Errorf("member %s at %v: answered by the local member itself", etcd.IDString(m.ID), m.ClientURLs))
			continue
		case header.ClusterID != last.clusterID:
			errs = append(errs, fmt.Errorf("member %s at %v: answered by a member of etcd cluster %s, not of this cluster %s",
				etcd.IDString(m.ID), m.ClientURLs, etcd.IDString(header.ClusterID), etcd.IDString(last.clusterID)))
			continue
		}
		if _, listed := etcd.FindMember(members, last.id); listed {
			return fmt.Errorf("member %s at %v still lists member %s", etcd.IDString(header.MemberID), m.ClientURLs, etcd.IDString(last.id))
		}
		return nil
	}
	return fmt.Errorf("no other member answered: %w", errors.Join(errs...))
}

// askMember reads the member list from m alone, on a connection of its own that ends with the
// call: it is only needed once the local etcd is gone, until the command has run.
func (r *Registrar) askMember(ctx context.Context, m etcd.Member) ([]etcd.Member, etcd.Header, error) {
	if len(m.ClientURLs) == 0 {
		return nil, etcd.Header{}, errors.New("it has no client URLs")
	}
	c, err := r.Etcd.WithEndpoints(m.ClientURLs)
	if err != nil {
		return nil, etcd.Header{}, err
	}
	defer func() { _ = c.Close() }()
	return c.MemberListHeader(ctx)
}

// hookDue tells whether obj records member id as removed on request (never a refused or pending
// leave, never NotFound) and the command has not been started for that member yet.
func hookDue(obj *v1alpha1.EtcdMember, id string) bool {
	return obj.Status.MemberID == id && obj.Annotations[v1alpha1.AnnotationOnRemovedRan] != id &&
		obj.RecordedGone() && status.HasReason(obj, v1alpha1.ConditionJoined, v1alpha1.ReasonRemoved)
}

// markRan records on the object that the command runs for member id, before it starts. The
// update carries the resourceVersion just read, so a concurrent change makes it fail (and the
// next sync decide again) instead of being overwritten. Once it is written, no restart runs the
// command again; a write that fails ambiguously may mean the command never runs at all, which is
// the side to err on for a command that stops services and moves data away.
func (r *Registrar) markRan(ctx context.Context, obj *v1alpha1.EtcdMember, id string) error {
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[v1alpha1.AnnotationOnRemovedRan] = id
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	if err := r.Client.Update(ctx, obj); err != nil {
		return fmt.Errorf("recording on EtcdMember %s that the on-removed command runs: %w", obj.Name, err)
	}
	return nil
}

// runAndRecord runs the command and writes its outcome as an Event.
func (h OnRemovedHook) runAndRecord(ctx context.Context, rec *events.Recorder, obj *v1alpha1.EtcdMember, id string) {
	log := logf.FromContext(ctx).WithValues("object", obj.Name, "memberID", id)
	log.Info("The local member was removed on request; running the on-removed command", "timeout", h.Timeout)
	res := h.run(ctx, "ETCDMEMBER_NAME="+obj.Name, "ETCDMEMBER_MEMBER_ID="+id)
	// The outcome is worth recording even when the agent is stopping and has killed the command.
	ctx = context.WithoutCancel(ctx)
	if res.err != nil {
		log.Error(res.err, "The on-removed command failed", "exitCode", res.exitCode(), "duration", res.duration)
		rec.Warning(ctx, obj, v1alpha1.ReasonOnRemovedExecFailed, "OnRemovedExec", res.note(id))
		return
	}
	log.Info("The on-removed command succeeded", "duration", res.duration)
	rec.Normal(ctx, obj, v1alpha1.ReasonOnRemovedExecSucceeded, "OnRemovedExec", res.note(id))
}

// hookResult is how one run of the command ended.
type hookResult struct {
	err      error
	output   string
	duration time.Duration
}

// run runs the command with /bin/sh -c in a process group of its own, so that a timeout (or the
// agent stopping) kills whatever it started too, not only the shell.
func (h OnRemovedHook) run(ctx context.Context, env ...string) hookResult {
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	out := &tailBuffer{max: outputTail}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", h.Command)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	ownProcessGroup(cmd)
	cmd.WaitDelay = waitDelay
	start := time.Now()
	err := cmd.Run()
	res := hookResult{output: out.String(), duration: time.Since(start)}
	switch {
	case errors.Is(err, exec.ErrWaitDelay):
		// The command itself exited 0; something it left in the background still holds its output.
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		res.err = fmt.Errorf("timed out after %s: %w", h.Timeout, err)
	case err != nil && ctx.Err() != nil:
		res.err = fmt.Errorf("killed because the agent is stopping: %w", err)
	default:
		res.err = err
	}
	return res
}

// exitCode is the command's exit code, or -1 when it did not exit by itself.
func (res hookResult) exitCode() int {
	var exit *exec.ExitError
	switch {
	case res.err == nil:
		return 0
	case errors.As(res.err, &exit):
		return exit.ExitCode()
	default:
		return -1
	}
}

// note is the Event note: how the command ended, then the end of what it printed.
func (res hookResult) note(id string) string {
	outcome := "exited with code 0"
	if res.err != nil {
		outcome = fmt.Sprintf("failed: %v (exit code %d)", res.err, res.exitCode())
	}
	return fmt.Sprintf("The on-removed command for member %s %s after %s. Output:\n%s",
		id, outcome, res.duration.Round(time.Millisecond), res.output)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max     int
	buf     []byte
	dropped bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > b.max {
		p = p[len(p)-b.max:]
		b.dropped = true
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.dropped = true
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String returns what was kept, marking a cut and dropping a character it split.
func (b *tailBuffer) String() string {
	s := strings.ToValidUTF8(string(b.buf), "")
	if b.dropped {
		return "[...]" + s
	}
	return s
}
