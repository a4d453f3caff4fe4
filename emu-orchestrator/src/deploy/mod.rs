//! Artefacts that others run a fabric from: Kubernetes manifests (the
//! emu-nodes as pods), the container image they name, and the soft-RoCE
//! VM image (kernel and initramfs) that VM hosts boot.

pub mod container_image;
pub mod k8s;
pub mod vm_image;
