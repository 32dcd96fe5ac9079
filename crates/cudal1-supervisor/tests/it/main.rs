//! Integration tests of cudal1-supervisor against real Python worker processes.

mod children;
mod common;
mod lifecycle;
mod misbehaving;
/// Workers started by fork and exec.
mod sandbox {
    const FORKED: bool = false;
    include!("sandbox.rs");
}
/// The same escapes by workers forked from a fork server (`Zygote`): they confine themselves
/// before they run anything, and must end up exactly as confined.
mod sandbox_forked {
    const FORKED: bool = true;
    include!("sandbox.rs");
}
mod zygote;
