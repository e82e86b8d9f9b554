//! Who a process belongs to, as the labels of its series: its cgroup v2
//! path (resolved from the kernel's cgroup id, `cgroup.rs`), what that path
//! says (systemd unit, container runtime and id, pod UID: `identity.rs`) and,
//! with `--kubernetes.enabled`, its pod's namespace, name and container from
//! a watch of the node's pods (`kubernetes.rs`). Nothing here knows any
//! signal: every series gets the same labels.

pub mod cgroup;
pub mod identity;
pub mod kubernetes;

pub use kubernetes::PodLabels;
