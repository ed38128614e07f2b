//! With the `dpdk` feature: compiles the C shim of the DPDK port backend
//! (`src/port/dpdk/shim.c`) and links DPDK, both with what `pkg-config libdpdk` says.
//! Without it (the default) this does nothing, and nothing of DPDK is needed.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "dpdk")]
    dpdk::build();
}

#[cfg(feature = "dpdk")]
mod dpdk {
    use std::process::Command;

    /// `pkg-config ARGS libdpdk`, split into words; a clear stop when DPDK is not installed.
    fn pkg_config(args: &[&str]) -> Vec<String> {
        let out = Command::new("pkg-config")
            .args(args)
            .arg("libdpdk")
            .output();
        match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            Ok(o) => panic!(
                "the dpdk feature needs DPDK's development files (pkg-config libdpdk: {}); on \
                 Debian: apt-get install libdpdk-dev pkg-config",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => panic!(
                "the dpdk feature needs pkg-config and DPDK's development files ({e}); on Debian: \
                 apt-get install libdpdk-dev pkg-config"
            ),
        }
    }

    pub(super) fn build() {
        let shim = "src/port/dpdk/shim.c";
        println!("cargo:rerun-if-changed={shim}");
        println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
        let mut cc = cc::Build::new();
        cc.file(shim)
            .warnings(true)
            .flag_if_supported("-Wno-unused-parameter");
        let cflags = pkg_config(&["--cflags"]);
        let mut words = cflags.iter();
        while let Some(w) = words.next() {
            if let Some(dir) = w.strip_prefix("-I") {
                cc.include(dir);
            } else if w == "-include" {
                // `-include rte_config.h`: DPDK's headers need it first.
                if let Some(h) = words.next() {
                    cc.flag("-include").flag(h);
                }
            } else {
                cc.flag(w);
            }
        }
        cc.compile("sprayswitch_dpdk_shim");
        for w in pkg_config(&["--libs"]) {
            if let Some(dir) = w.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            } else if let Some(lib) = w.strip_prefix("-l") {
                println!("cargo:rustc-link-lib={lib}");
            }
            // Anything else (`-Wl,--as-needed`) is a linker flag for the final link, which a
            // library's build script cannot pass to its dependents' binaries: left out, the
            // libraries are linked as they are named.
        }
    }
}
