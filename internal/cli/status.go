package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/etcdmember/etcdmember/api/v1alpha1"
	"github.com/etcdmember/etcdmember/internal/etcd"
	"github.com/etcdmember/etcdmember/internal/status"
)

// Notes that make a one-sided row stand out.
const (
	noteNoObject   = "no EtcdMember object"
	noteNotInEtcd  = "not in etcd"
	noteNoMemberID = "no member ID recorded"
)

// leaveRequested is the LEAVE state of a request the controller has not answered yet.
const leaveRequested = "Requested"

// Row is one line of the status output: an EtcdMember object joined with the etcd member it
// records, or a member etcd lists that has no object. Every field is always present in JSON and
// YAML; a null means unknown (etcd was not asked, or the member did not answer).
type Row struct {
	// Name is the object's name; empty for an etcd member without an object.
	Name string `json:"name"`
	// EtcdName is the name etcd lists the member under; empty when etcd does not list it.
	EtcdName string   `json:"etcdName"`
	MemberID string   `json:"memberID"`
	PeerURLs []string `json:"peerURLs"`
	Learner  bool     `json:"learner"`
	// InEtcd tells whether etcd's member list has the member; null when etcd was not asked.
	InEtcd *bool `json:"inEtcd"`
	Leader *bool `json:"leader"`
	// Healthy: the member answered a Status request on its client URL within the timeout.
	Healthy   *bool   `json:"healthy"`
	RaftIndex *uint64 `json:"raftIndex"`
	// DBSize is the backend database size in bytes.
	DBSize *int64 `json:"dbSize"`
	// Joined is the status of the Joined condition; empty without one.
	Joined string `json:"joined"`
	// Leave is empty when no leave was asked for, "Requested" until the controller answers,
	// then the Left condition's reason (Removed, QuorumAtRisk, ...).
	Leave string `json:"leave"`
	Note  string `json:"note"`
}

// EtcdView is what etcd said: its member list and the answers of the members that answered.
type EtcdView struct {
	Members []etcd.Member
	Status  map[uint64]MemberStatus
}

// MemberStatus is one member's answer to a Status request.
type MemberStatus struct {
	Leader    uint64
	RaftTerm  uint64
	RaftIndex uint64
	DBSize    int64
}

// StatusOptions configures Status.
type StatusOptions struct {
	// Etcd is optional: without endpoints the live columns are unknown.
	Etcd    etcd.Config
	Output  Output
	Timeout time.Duration
}

// Status prints every EtcdMember next to what etcd says of its member. When etcd cannot be read
// it still prints the objects, then returns the etcd error.
func Status(ctx context.Context, c client.Client, out io.Writer, opts StatusOptions) error {
	objects, err := listMembers(ctx, c, opts.Timeout)
	if err != nil {
		return explain(err, "list", "", "list")
	}
	var view *EtcdView
	var etcdErr error
	if len(opts.Etcd.Endpoints) > 0 {
		view, etcdErr = QueryEtcd(ctx, opts.Etcd, opts.Timeout)
	}
	if err := WriteRows(out, BuildRows(objects, view), opts.Output); err != nil {
		return err
	}
	if etcdErr != nil {
		return fmt.Errorf("live columns unknown: %w", etcdErr)
	}
	return nil
}

// BuildRows joins the objects with etcd's view by member ID; view is nil when etcd was not asked.
// Objects come first, by name, then members without an object, by etcd name and ID.
func BuildRows(objects []v1alpha1.EtcdMember, view *EtcdView) []Row {
	j := newJoin(view)
	rows := make([]Row, 0, len(objects))
	for i := range objects {
		rows = append(rows, j.object(&objects[i]))
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return append(rows, j.orphans()...)
}

// join matches objects to etcd members and remembers which members found an object.
type join struct {
	view        *EtcdView
	listed      map[uint64]etcd.Member
	claimed     map[uint64]bool
	leader      uint64
	leaderKnown bool
}

func newJoin(view *EtcdView) *join {
	j := &join{view: view, listed: map[uint64]etcd.Member{}, claimed: map[uint64]bool{}}
	if view != nil {
		for _, m := range view.Members {
			j.listed[m.ID] = m
		}
	}
	j.leader, j.leaderKnown = view.leader()
	return j
}

func (j *join) object(obj *v1alpha1.EtcdMember) Row {
	r := objectRow(obj)
	if j.view == nil {
		return r
	}
	id, err := etcd.ParseID(r.MemberID)
	m, ok := j.listed[id]
	inEtcd := err == nil && ok
	r.InEtcd = &inEtcd
	switch {
	case inEtcd:
		j.claimed[id] = true
		j.live(&r, m)
	case r.MemberID == "":
		r.Note = noteNoMemberID
	default:
		r.Note = noteNotInEtcd
	}
	return r
}

// orphans are the members no object claimed, sorted by etcd name and ID.
func (j *join) orphans() []Row {
	var rows []Row
	for id, m := range j.listed {
		if j.claimed[id] {
			continue
		}
		inEtcd := true
		r := Row{MemberID: etcd.IDString(id), InEtcd: &inEtcd, Note: orphanNote(m)}
		j.live(&r, m)
		rows = append(rows, r)
	}
	sort.Slice(rows, func(a, b int) bool {
		if rows[a].EtcdName != rows[b].EtcdName {
			return rows[a].EtcdName < rows[b].EtcdName
		}
		return rows[a].MemberID < rows[b].MemberID
	})
	return rows
}

// live copies etcd's view of member m into r: etcd's record wins over the object's copy.
func (j *join) live(r *Row, m etcd.Member) {
	r.EtcdName = m.Name
	r.PeerURLs = nonNil(m.PeerURLs)
	r.Learner = m.IsLearner
	st, answered := j.view.Status[m.ID]
	r.Healthy = &answered
	if j.leaderKnown {
		isLeader := m.ID == j.leader
		r.Leader = &isLeader
	}
	if answered {
		r.RaftIndex = &st.RaftIndex
		r.DBSize = &st.DBSize
	}
}

func objectRow(m *v1alpha1.EtcdMember) Row {
	r := Row{
		Name:     m.Name,
		MemberID: m.Status.MemberID,
		PeerURLs: nonNil(m.Status.PeerURLs),
		Learner:  m.Status.IsLearner,
	}
	if c := status.Get(m, v1alpha1.ConditionJoined); c != nil {
		r.Joined = string(c.Status)
	}
	switch c := status.Get(m, v1alpha1.ConditionLeft); {
	case c != nil:
		r.Leave = c.Reason
	case m.Spec.Leave:
		r.Leave = leaveRequested
	}
	return r
}

// orphanNote gives the etcd name, the only way to tell such members apart; a member that never
// started has none yet.
func orphanNote(m etcd.Member) string {
	if m.Name == "" {
		return noteNoObject + "; never started"
	}
	return fmt.Sprintf("%s; etcd name %q", noteNoObject, m.Name)
}

// leader is the leader named by the answer with the highest raft term: during an election members
// may still name the previous one.
func (v *EtcdView) leader() (uint64, bool) {
	if v == nil {
		return 0, false
	}
	var best MemberStatus
	found := false
	for _, st := range v.Status {
		if st.Leader != 0 && (!found || st.RaftTerm > best.RaftTerm) {
			best, found = st, true
		}
	}
	return best.Leader, found
}

// nonNil keeps a JSON list a list: scripts should not have to handle null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Output is an output format of the status command; it implements pflag.Value so a bad format
// fails at flag parsing, before anything is contacted.
type Output string

// Output formats.
const (
	OutputTable Output = "table"
	OutputJSON  Output = "json"
	OutputYAML  Output = "yaml"
)

func (o *Output) String() string { return string(*o) }

// Set accepts table, json or yaml.
func (o *Output) Set(s string) error {
	switch Output(s) {
	case OutputTable, OutputJSON, OutputYAML:
		*o = Output(s)
		return nil
	}
	return fmt.Errorf("unknown output format %q: use table, json or yaml", s)
}

// Type names the flag's value in --help.
func (o *Output) Type() string { return "format" }

// WriteRows prints the rows in the format asked for.
func WriteRows(w io.Writer, rows []Row, format Output) error {
	switch format {
	case OutputJSON:
		data, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding JSON: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case OutputYAML:
		data, err := yaml.Marshal(rows)
		if err != nil {
			return fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(data)
		return err
	default:
		return writeTable(w, rows)
	}
}

// writeTable prints no cell with a space except NOTE, the last column, so that the table splits
// on whitespace. NOTE appears only when some row has one.
func writeTable(w io.Writer, rows []Row) error {
	withNote := false
	for _, r := range rows {
		withNote = withNote || r.Note != ""
	}
	header := []string{"NAME", "MEMBER ID", "PEER URLS", "LEARNER", "LEADER", "HEALTHY", "RAFT INDEX", "DB SIZE", "JOINED", "LEAVE"}
	if withNote {
		header = append(header, "NOTE")
	}
	var cells strings.Builder
	cells.WriteString(strings.Join(header, "\t") + "\n")
	for _, r := range rows {
		row := tableCells(r)
		if withNote {
			row = append(row, r.Note)
		}
		cells.WriteString(strings.Join(row, "\t") + "\n")
	}
	var aligned bytes.Buffer
	tw := tabwriter.NewWriter(&aligned, 0, 8, 3, ' ', 0)
	if _, err := io.WriteString(tw, cells.String()); err != nil {
		return fmt.Errorf("aligning the table: %w", err)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("aligning the table: %w", err)
	}
	// tabwriter pads an empty NOTE cell too; trailing blanks would only get in the way of diffs.
	var trimmed strings.Builder
	for line := range strings.Lines(aligned.String()) {
		trimmed.WriteString(strings.TrimRight(line, " \n") + "\n")
	}
	_, err := io.WriteString(w, trimmed.String())
	return err
}

func tableCells(r Row) []string {
	// "?" is unknown (etcd not asked, or no answer); "-" is does not apply.
	missing := "?"
	if r.InEtcd != nil && !*r.InEtcd {
		missing = "-"
	}
	return []string{
		orDash(r.Name, "<none>"),
		orDash(r.MemberID, "-"),
		orDash(strings.Join(r.PeerURLs, ","), "-"),
		yesNo(r.Learner),
		optional(r.Leader, yesNo, missing),
		optional(r.Healthy, yesNo, missing),
		optional(r.RaftIndex, func(i uint64) string { return strconv.FormatUint(i, 10) }, missing),
		optional(r.DBSize, humanBytes, missing),
		orDash(r.Joined, "-"),
		orDash(r.Leave, "-"),
	}
}

func orDash(s, dash string) string {
	if s == "" {
		return dash
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func optional[T any](v *T, format func(T) string, missing string) string {
	if v == nil {
		return missing
	}
	return format(*v)
}

// humanBytes prints binary units without a space, keeping the cell one word.
func humanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%dB", n)
	}
	return fmt.Sprintf("%.1f%s", v, units[i])
}
