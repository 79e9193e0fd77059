package printers

import (
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/util/jsonpath"

	"github.com/etcdmember/kubectl-etcdmember/api/v1alpha1"
)

// Output formats of ours; every other -o value goes to cli-runtime's printers.
const (
	FormatTable         = ""
	FormatWide          = "wide"
	customColumnsPrefix = "custom-columns="
)

// IsTable tells the formats printed as our own table (including custom-columns).
func IsTable(format string) bool {
	return format == FormatTable || format == FormatWide || strings.HasPrefix(format, customColumnsPrefix)
}

// Formats lists every -o value, for help texts and error messages.
func Formats(flags *genericclioptions.PrintFlags) []string {
	return append([]string{FormatWide, "custom-columns=HEADER:JSONPATH,..."}, flags.AllowedFormats()...)
}

// WithKinds sets apiVersion and kind on the list and its items: typed reads leave them empty,
// and printers such as -o name and every -o json consumer need them.
func WithKinds(list *v1alpha1.EtcdMemberList) *v1alpha1.EtcdMemberList {
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("EtcdMemberList"))
	for i := range list.Items {
		list.Items[i].SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("EtcdMember"))
	}
	return list
}

// column is one custom column: a header and the JSONPath that fills it.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// CustomColumns is kubectl's -o custom-columns=HEADER:JSONPATH,... for EtcdMember objects.
type CustomColumns struct {
	columns []column
}

// ParseCustomColumns reads the part of -o custom-columns=... after the "=". A path may be
// written with or without kubectl's braces.
func ParseCustomColumns(format string) (*CustomColumns, error) {
	spec := strings.TrimPrefix(format, customColumnsPrefix)
	if spec == "" {
		return nil, fmt.Errorf("custom-columns format specified but no custom columns given")
	}
	cc := &CustomColumns{}
	for _, part := range strings.Split(spec, ",") {
		header, path, ok := strings.Cut(part, ":")
		if !ok || header == "" || path == "" {
			return nil, fmt.Errorf("custom-columns: %q is not HEADER:JSONPATH", part)
		}
		if !strings.HasPrefix(path, "{") {
			path = "{" + path + "}"
		}
		jp := jsonpath.New(header).AllowMissingKeys(true)
		if err := jp.Parse(path); err != nil {
			return nil, fmt.Errorf("custom-columns: column %s: %w", header, err)
		}
		cc.columns = append(cc.columns, column{header: header, path: jp})
	}
	return cc, nil
}

// Table evaluates the columns on each object; a path that finds nothing prints <none>, as
// kubectl's does.
func (cc *CustomColumns) Table(items []v1alpha1.EtcdMember) (Table, error) {
	t := Table{}
	for _, c := range cc.columns {
		t.Header = append(t.Header, c.header)
	}
	for i := range items {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&items[i])
		if err != nil {
			return Table{}, fmt.Errorf("custom-columns: %s: %w", items[i].Name, err)
		}
		var cells []string
		for _, c := range cc.columns {
			results, err := c.path.FindResults(obj)
			if err != nil {
				return Table{}, fmt.Errorf("custom-columns: column %s of %s: %w", c.header, items[i].Name, err)
			}
			var values []string
			for _, set := range results {
				for _, v := range set {
					values = append(values, fmt.Sprint(v.Interface()))
				}
			}
			cells = append(cells, dash(strings.Join(values, ","), "<none>"))
		}
		t.Rows = append(t.Rows, cells)
	}
	return t, nil
}

// PrintObjects prints the list with cli-runtime's printer for the -o format in flags (json,
// yaml, name, jsonpath, go-template, ...), as kubectl get prints a list.
func PrintObjects(flags *genericclioptions.PrintFlags, list *v1alpha1.EtcdMemberList, w io.Writer) error {
	p, err := flags.ToPrinter()
	if err != nil {
		return err
	}
	WithKinds(list)
	// The name printer takes one object at a time, as kubectl get feeds it.
	if flags.OutputFormat != nil && *flags.OutputFormat == "name" {
		for i := range list.Items {
			if err := p.PrintObj(&list.Items[i], w); err != nil {
				return err
			}
		}
		return nil
	}
	return p.PrintObj(list, w)
}

// PrintObject prints one object in the -o format in flags, for a watch's events.
func PrintObject(flags *genericclioptions.PrintFlags, m *v1alpha1.EtcdMember, w io.Writer) error {
	p, err := flags.ToPrinter()
	if err != nil {
		return err
	}
	m.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("EtcdMember"))
	return p.PrintObj(m, w)
}
