package printers

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

func etcdMember(name, id string, conds ...metav1.Condition) v1alpha1.EtcdMember {
	return v1alpha1.EtcdMember{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Status: v1alpha1.EtcdMemberStatus{
			MemberID:   id,
			PeerURLs:   []string{"https://" + name + ":2380"},
			ClientURLs: []string{"https://" + name + ":2379"},
			Conditions: conds,
		},
	}
}

func objects() []v1alpha1.EtcdMember {
	joinedTrue := metav1.Condition{Type: v1alpha1.ConditionJoined, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonInMemberList, LastTransitionTime: metav1.NewTime(now)}
	healthyFalse := metav1.Condition{Type: v1alpha1.ConditionHealthy, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonUnreachable, LastTransitionTime: metav1.NewTime(now)}
	node1 := etcdMember("node-1", "8e9e05c52164694d", joinedTrue)
	node1.Status.Health = &v1alpha1.MemberHealth{Reachable: true, Leader: true, RaftTerm: 3, DBSizeBytes: 4096, LastProbeTime: metav1.NewTime(now)}
	node2 := etcdMember("node-2", "91bc3c398fb3c146", joinedTrue, healthyFalse)
	node2.Spec.Leave = true
	node2.Status.PeerURLs = append(node2.Status.PeerURLs, "https://[fd00::2]:2380")
	fresh := etcdMember("fresh", "")
	fresh.Status.ClientURLs = nil
	return []v1alpha1.EtcdMember{node1, node2, fresh}
}

func TestCustomColumns(t *testing.T) {
	cases := []struct {
		name string
		spec string
	}{
		{"custom-columns", `custom-columns=NAME:.metadata.name,ID:{.status.memberID},PEERS:.status.peerURLs[*],` +
			`JOINED:.status.conditions[?(@.type=="Joined")].status,LEADER:.status.health.leader,LEAVE:.spec.leave,` +
			`ALARMS:.status.health.alarms,NOPE:.status.nosuchfield`},
		{"custom-columns-mixed-case", `custom-columns=Name:.metadata.name,memberId:.status.memberID`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := ParseCustomColumns(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := cc.Table(objects())
			if err != nil {
				t.Fatal(err)
			}
			out := writeTable(t, tbl, false)
			golden(t, tc.name, out)
			checkLayout(t, out)
			checkColumns(t, tbl.Header, tbl.Rows, out)
		})
	}
}

func TestCustomColumnsMissingPathPrintsNone(t *testing.T) {
	cc, err := ParseCustomColumns("custom-columns=NAME:.metadata.name,TERM:.status.health.raftTerm,MISSING:.no.such.path")
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cc.Table(objects())
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"node-1", "3", "<none>"}, {"node-2", "<none>", "<none>"}, {"fresh", "<none>", "<none>"}}
	for i := range want {
		if !slices.Equal(tbl.Rows[i], want[i]) {
			t.Errorf("row %d: %q, want %q", i, tbl.Rows[i], want[i])
		}
	}
	if want := []string{"NAME", "TERM", "MISSING"}; !slices.Equal(tbl.Header, want) {
		t.Errorf("header %q, want %q", tbl.Header, want)
	}
}

func TestCustomColumnsBadSpec(t *testing.T) {
	cases := []struct {
		spec string
		want string
	}{
		{"custom-columns=", "custom-columns format specified but no custom columns given"},
		{"custom-columns=NAME", `custom-columns: "NAME" is not HEADER:JSONPATH`},
		{"custom-columns=NAME:.metadata.name,:.status.memberID", `custom-columns: ":.status.memberID" is not HEADER:JSONPATH`},
		{"custom-columns=NAME:", `custom-columns: "NAME:" is not HEADER:JSONPATH`},
		{"custom-columns=NAME:{.metadata.name", "custom-columns: column NAME: "},
		{"custom-columns=ID:.status.conditions[?(@.type==", "custom-columns: column ID: "},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			cc, err := ParseCustomColumns(tc.spec)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || cc != nil {
				t.Errorf("ParseCustomColumns = %v, %v; want an error starting with %q", cc, err, tc.want)
			}
		})
	}
}

func TestIsTable(t *testing.T) {
	for format, want := range map[string]bool{
		"": true, "wide": true, "custom-columns=NAME:.metadata.name": true,
		"json": false, "yaml": false, "name": false, "jsonpath={.items}": false, "custom-columns-file=x": false,
	} {
		if got := IsTable(format); got != want {
			t.Errorf("IsTable(%q) = %t, want %t", format, got, want)
		}
	}
}

func TestFormats(t *testing.T) {
	got := Formats(genericclioptions.NewPrintFlags(""))
	for _, want := range []string{"wide", "custom-columns=HEADER:JSONPATH,...", "json", "yaml", "name", "jsonpath"} {
		if !slices.Contains(got, want) {
			t.Errorf("Formats() = %q, lacks %q", got, want)
		}
	}
}

// printFlags are kubectl's printing flags as -o output and --template template set them. As
// with flags bound to a command, a template without -o means go-template.
func printFlags(output, template string) *genericclioptions.PrintFlags {
	flags := genericclioptions.NewPrintFlags("")
	*flags.OutputFormat = output
	*flags.TemplatePrinterFlags.TemplateArgument = template
	flags.OutputFlagSpecified = func() bool { return output != "" }
	return flags
}

func printObjects(t *testing.T, format, template string) string {
	t.Helper()
	list := &v1alpha1.EtcdMemberList{Items: objects()}
	var buf bytes.Buffer
	if err := PrintObjects(printFlags(format, template), list, &buf); err != nil {
		t.Fatalf("-o %s: %v", format, err)
	}
	return buf.String()
}

func TestPrintObjectsJSONAndYAML(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			out := printObjects(t, format, "")
			var list struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Items      []struct {
					APIVersion string `json:"apiVersion"`
					Kind       string `json:"kind"`
					Metadata   struct {
						Name string `json:"name"`
					} `json:"metadata"`
					Spec struct {
						Leave *bool `json:"leave"`
					} `json:"spec"`
				} `json:"items"`
			}
			var err error
			if format == "json" {
				err = json.Unmarshal([]byte(out), &list)
			} else {
				err = yaml.Unmarshal([]byte(out), &list)
			}
			if err != nil {
				t.Fatalf("%v in\n%s", err, out)
			}
			if list.APIVersion != "etcdmember.io/v1alpha1" || list.Kind != "EtcdMemberList" {
				t.Errorf("list apiVersion %q, kind %q", list.APIVersion, list.Kind)
			}
			var names []string
			for _, it := range list.Items {
				names = append(names, it.Metadata.Name)
				if it.APIVersion != "etcdmember.io/v1alpha1" || it.Kind != "EtcdMember" {
					t.Errorf("%s: apiVersion %q, kind %q", it.Metadata.Name, it.APIVersion, it.Kind)
				}
				if it.Spec.Leave == nil {
					t.Errorf("%s: spec.leave missing", it.Metadata.Name)
				}
			}
			if want := []string{"node-1", "node-2", "fresh"}; !slices.Equal(names, want) {
				t.Errorf("items %q, want %q", names, want)
			}
		})
	}
}

func TestPrintObjectsNameAndJSONPath(t *testing.T) {
	cases := []struct {
		format, template, want string
	}{
		{"name", "", "etcdmember.etcdmember.io/node-1\netcdmember.etcdmember.io/node-2\netcdmember.etcdmember.io/fresh\n"},
		{"jsonpath", `{range .items[*]}{.metadata.name}={.status.memberID}{"\n"}{end}`, "node-1=8e9e05c52164694d\nnode-2=91bc3c398fb3c146\nfresh=\n"},
		{"jsonpath", "{.kind} {.apiVersion} {.items[0].kind}", "EtcdMemberList etcdmember.io/v1alpha1 EtcdMember"},
		{"jsonpath", "{.items[*].status.health.raftTerm}", "3"},
		{"go-template", `{{range .items}}{{.metadata.name}} {{end}}`, "node-1 node-2 fresh "},
		// As typed: -o jsonpath=TEMPLATE.
		{`jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}`, "", "node-1\nnode-2\nfresh\n"},
		{"go-template={{len .items}}", "", "3"},
		// --template alone is a go-template, as in kubectl.
		{"", "{{.kind}}", "EtcdMemberList"},
	}
	for _, tc := range cases {
		t.Run(tc.format+" "+tc.template, func(t *testing.T) {
			if got := printObjects(t, tc.format, tc.template); got != tc.want {
				t.Errorf("-o %s: got\n%q\nwant\n%q", tc.format, got, tc.want)
			}
		})
	}
	// -o name agrees with ObjectName.
	for _, line := range strings.Split(strings.TrimSpace(printObjects(t, "name", "")), "\n") {
		name := line[strings.LastIndex(line, "/")+1:]
		if ObjectName(name) != line {
			t.Errorf("-o name printed %q, ObjectName says %q", line, ObjectName(name))
		}
	}
}

func TestPrintObjectsBadFormat(t *testing.T) {
	var buf bytes.Buffer
	err := PrintObjects(printFlags("bogus", ""), &v1alpha1.EtcdMemberList{Items: objects()}, &buf)
	if err == nil || buf.Len() != 0 {
		t.Errorf("-o bogus: %v, printed %q", err, buf.String())
	}
}

func TestPrintObject(t *testing.T) {
	m := objects()[0]
	cases := []struct {
		format, template, want string
	}{
		{"name", "", "etcdmember.etcdmember.io/node-1\n"},
		{"jsonpath", "{.apiVersion}/{.kind}/{.metadata.name}", "etcdmember.io/v1alpha1/EtcdMember/node-1"},
		{"jsonpath={.kind}", "", "EtcdMember"},
	}
	for _, tc := range cases {
		var buf bytes.Buffer
		if err := PrintObject(printFlags(tc.format, tc.template), m.DeepCopy(), &buf); err != nil {
			t.Fatalf("-o %s: %v", tc.format, err)
		}
		if got := buf.String(); got != tc.want {
			t.Errorf("-o %s: %q, want %q", tc.format, got, tc.want)
		}
	}
}
