package agent

// What the agent does with the API, and nothing more: controller-gen turns these markers into
// config/rbac. The registrar creates and updates its own member's object; the leader watches all
// of them and writes their status; every agent campaigns for the Lease (and watches it, to campaign again the moment it is
// released) and writes Events, both in kube-system only. The Lease rules name v1alpha1.LeaseName: kube-system also holds the Leases of
// kube-controller-manager and kube-scheduler, which an agent must not be able to take. RBAC cannot
// limit create by name, so create stays open (creating a Lease of another name takes nothing).
// The leader reads Nodes' metadata and patches their finalizers (the node controller); RBAC cannot
// narrow a patch to one field, so config/admission/node_guard.yaml refuses every other change an
// agent's identity makes to a Node. Off loopback the metrics endpoint asks the apiserver who
// the caller is and whether it may get /metrics (metricsserving.go): one TokenReview and one
// SubjectAccessReview per caller, cached.

// +kubebuilder:rbac:groups=etcdmember.io,resources=etcdmembers,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=etcdmember.io,resources=etcdmembers/status,verbs=update
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kube-system,resources=leases,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kube-system,resources=leases,resourceNames=etcdmember-leader,verbs=get;update;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,namespace=kube-system,resources=events,verbs=create
