//! `sprayrackd` refuses bad input with a message naming it, before it touches any interface.

use std::process::Command;

fn sprayrackd(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sprayrackd"))
        .args(args)
        .output()
        .expect("sprayrackd runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_input_is_refused_with_a_message() {
    for (args, says) in [
        (&["--path", "delay=1"][..], "unknown key 'delay'"),
        (&["--path", "loss=2"][..], "probability"),
        (&["--path", "", "--backend", "mem"][..], "real interfaces"),
        (&["--path", "", "--backend", "bogus"][..], "'bogus'"),
        (
            &["--path", "", "--policy", "nope"][..],
            "unknown spray policy",
        ),
        (&["--path", "", "--hosts", "0"][..], "--hosts 0"),
        (&["--path", "", "--mtu", "20"][..], "mtu"),
        (
            &[
                "--path",
                "",
                "--backend",
                "af_packet",
                "--host-prefix-a",
                "no-such-if",
            ][..],
            "no-such-if1",
        ),
    ] {
        let (ok, err) = sprayrackd(args);
        assert!(!ok, "{args:?} was accepted");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
