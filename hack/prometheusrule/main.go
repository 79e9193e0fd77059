// Command prometheusrule writes config/prometheus/prometheusrule.yaml, the Prometheus Operator's
// form of the alerts, from config/prometheus/rules.yaml, the stand-alone rules file: one source,
// so the two can never say different things. `make generate` runs it and `make verify` fails
// when its output is stale.
package main

import (
	"bytes"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"
)

const header = "# Generated from config/prometheus/rules.yaml by `make generate`: edit that file, not this one.\n"

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: prometheusrule RULES.yaml OUT.yaml")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "prometheusrule:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	src, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	rendered, err := render(src)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, rendered, 0o644)
}

// render wraps the rules file's groups, kept node for node so that their order and comments
// survive, in a PrometheusRule.
func render(src []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	groups := lookup(&doc, "groups")
	if groups == nil || groups.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("no groups list at the top")
	}
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }
	mapping := func(kv ...*yaml.Node) *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Content: kv} }
	rule := mapping(
		str("apiVersion"), str("monitoring.coreos.com/v1"),
		str("kind"), str("PrometheusRule"),
		str("metadata"), mapping(
			str("name"), str("etcdmember"),
			str("namespace"), str("kube-system"),
			str("labels"), mapping(str("app.kubernetes.io/name"), str("etcdmember")),
		),
		str("spec"), mapping(str("groups"), groups),
	)
	var b bytes.Buffer
	b.WriteString(header)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(rule); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// lookup returns the value of key in the document's top-level mapping.
func lookup(doc *yaml.Node, key string) *yaml.Node {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == key {
			return top.Content[i+1]
		}
	}
	return nil
}
