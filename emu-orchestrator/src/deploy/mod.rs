//! Artefacts that others run a fabric from: Kubernetes manifests (the
//! emu-nodes as pods) and the soft-RoCE VM image (kernel and initramfs)
//! that VM hosts boot.

pub mod k8s;
pub mod vm_image;
