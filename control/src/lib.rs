//! sprayswitch control plane.
