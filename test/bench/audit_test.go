//go:build bench

package bench

// auditPolicy has the apiserver log every request about Nodes, and every write to an EtcdMember,
// at the Metadata level (who, what, when; no bodies), and nothing else. The bench's own creates
// of Nodes are left out: thousands of lines that say nothing.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: [framework-admin]
  verbs: [create]
  resources: [{group: "", resources: [nodes]}]
- level: Metadata
  resources: [{group: "", resources: [nodes]}]
- level: Metadata
  verbs: [create, update, patch, delete]
  resources: [{group: etcdmember.io, resources: [etcdmembers, etcdmembers/status]}]
- level: None
`
