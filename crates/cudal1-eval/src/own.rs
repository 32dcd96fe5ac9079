//! Own-kernel share: how much of a program's GPU time runs in kernels it built itself, against
//! library and PyTorch kernels.
//!
//! The main type is [`OwnKernels`], the set of kernel names that count as the program's own,
//! taken only from what the program's process cannot change:
//!
//! - the function symbols of the extension libraries the compile pool built and published
//!   read-only ([`crate::compile::BUILDS`]), read from their ELF symbol tables here, on the
//!   trusted side (nvcc gives each `__global__` kernel a host function of the same mangled name);
//! - the names of the `@triton.jit` functions in the program's source (Triton names each kernel
//!   after its function).
//!
//! The time per kernel comes from Nsight Compute, run outside the program's process, with
//! mangled names ([`crate::profile::Profile::mangled`]), so that a kernel's name is exact.
//! [`attribute`] splits a profile into own and library time; every kernel whose name is not in the
//! set is library time. A name that is also a library's (one PyTorch's reference run launched, or
//! a name in a library's namespace: `at::`, `c10::`, `cub::`, cuBLAS's `sm90_xmma_*`, Inductor's
//! `triton_poi_*`, ...) counts as library time even when the program defines it: a program that
//! names its kernel like a library one only lowers its own share, and no library kernel can be
//! claimed by defining a function of its name.
//!
//! What the share cannot see: a program may behave differently while profiled than while timed
//! (ncu's injection can be detected); the profile's kernel time per call beside the timed call
//! ([`OwnShare::profiled_ms_per_call`]) makes a large difference visible.
//!
//! ```
//! use cudal1_eval::own::{attribute, OwnKernels};
//! use cudal1_eval::profile::{KernelLaunch, Profile, DURATION};
//!
//! let launch = |id, name: &str, ns| KernelLaunch {
//!     id, name: name.into(), block: String::new(), grid: String::new(),
//!     metrics: [(DURATION.to_owned(), ns)].into_iter().collect(),
//! };
//! let mut profile = Profile::from_launches(&[launch(0, "_Z6my_addPfS_", 300.0), launch(1, "ampere_sgemm_128x64_nn", 100.0)], 1);
//! profile.mangled = true;
//! let own = OwnKernels::from_names(["_Z6my_addPfS_".to_owned()], []);
//! let share = attribute(&profile, &own).unwrap();
//! assert_eq!(share.share, 0.75);
//! ```

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::profile::Profile;

/// Where a kernel's time is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Built by the program: a symbol of its published extensions, or one of its Triton kernels.
    Own,
    /// PyTorch, cuBLAS, cuDNN, ... : not built by the program.
    Library,
    /// Defined by the program under a library's name: counted as library time.
    LibraryName,
}

/// One kernel of a profile with the side its time counts on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttributedKernel {
    /// As the profile names it (mangled where it was profiled so).
    pub name: String,
    pub launches: u32,
    pub time_ns: f64,
    pub origin: Origin,
}

/// A program's own-kernel share, with what it was computed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnShare {
    /// Own kernel time over all kernel time, 0 to 1 (0 when no kernel ran).
    pub share: f64,
    pub own_ns: f64,
    pub total_ns: f64,
    /// The profiled calls.
    pub calls: u32,
    /// Kernel time per profiled call, milliseconds: compare with the timed call.
    pub profiled_ms_per_call: f64,
    /// Function symbols read from the program's published extensions.
    pub extension_symbols: usize,
    /// Its `@triton.jit` functions.
    pub triton_kernels: Vec<String>,
    /// Longest first.
    pub kernels: Vec<AttributedKernel>,
    /// False where the program builds no kernel that could be its own (no published extension
    /// symbol, no `@triton.jit` function): its share is 0 whatever runs, so it was not profiled
    /// and `kernels` is empty.
    #[serde(default = "profiled_by_default")]
    pub profiled: bool,
}

fn profiled_by_default() -> bool {
    true
}

impl OwnShare {
    /// The share of a program that builds no kernel ([`OwnKernels::defines_none`]): 0, known
    /// without profiling it, since only names it builds can count as its own.
    #[must_use]
    pub fn of_none(own: &OwnKernels) -> OwnShare {
        OwnShare {
            share: 0.0,
            own_ns: 0.0,
            total_ns: 0.0,
            calls: 0,
            profiled_ms_per_call: 0.0,
            extension_symbols: own.symbols.len(),
            triton_kernels: own.triton.iter().cloned().collect(),
            kernels: Vec::new(),
            profiled: false,
        }
    }

    /// `73% own (2 of 5 kernels)`.
    #[must_use]
    pub fn text(&self) -> String {
        if !self.profiled {
            return "0% own (it builds no kernel of its own: not profiled)".to_owned();
        }
        let own = self.kernels.iter().filter(|k| k.origin == Origin::Own).count();
        let claimed = self.kernels.iter().filter(|k| k.origin == Origin::LibraryName).count();
        let mut s =
            format!("{:.0}% own ({own} of {} kernels", self.share * 100.0, self.kernels.len());
        if claimed > 0 {
            s.push_str(&format!(
                "; {claimed} of its own named like a library's, counted as library"
            ));
        }
        s.push(')');
        s
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OwnError {
    #[error("the profile names kernels without their namespaces and arguments (made before own-kernel shares); profile it again instead of reusing the stored profile")]
    NotMangled,
    #[error("`{}` holds no published build of the compile pool; the share needs the pool's build (evaluate the program first)", .0.display())]
    NotPublished(std::path::PathBuf),
    #[error("reading the extension `{}`: {message}", path.display())]
    Library { path: std::path::PathBuf, message: String },
    #[error("the program built extensions in its own process that the compile pool could not build ahead ({}): their kernels cannot be told from a library's", .0.join(", "))]
    BuiltInItsProcess(Vec<String>),
}

/// The largest extension library whose symbols are read.
pub const MAX_LIBRARY_BYTES: u64 = 1 << 30;

/// The kernel names that count as a program's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnKernels {
    /// Function symbols of its published extensions.
    pub symbols: BTreeSet<String>,
    /// Its `@triton.jit` functions.
    pub triton: BTreeSet<String>,
    /// Names known to be a library's (the reference's profile): never own.
    pub library: BTreeSet<String>,
}

impl OwnKernels {
    #[must_use]
    pub fn from_names(
        symbols: impl IntoIterator<Item = String>,
        triton: impl IntoIterator<Item = String>,
    ) -> OwnKernels {
        OwnKernels {
            symbols: symbols.into_iter().collect(),
            triton: triton.into_iter().collect(),
            library: BTreeSet::new(),
        }
    }

    /// The own kernels of a program with `source`, whose extensions the pool published in
    /// `builds` (`None`: it builds none). A build directory that is not a published build is an
    /// error: its libraries may be the program's own writing.
    pub fn of_program(builds: Option<&Path>, source: &str) -> Result<OwnKernels, OwnError> {
        let mut symbols = BTreeSet::new();
        if let Some(dir) = builds.filter(|_| crate::compile::needs_compile(source)) {
            for lib in published_libraries(dir)? {
                // The build ran the program's import code: its library may be anything, a huge
                // file included.
                let size = std::fs::metadata(&lib).map(|m| m.len()).unwrap_or(0);
                if size > MAX_LIBRARY_BYTES {
                    return Err(OwnError::Library { path: lib, message: format!("{size} bytes, more than an extension has ({MAX_LIBRARY_BYTES} at most)") });
                }
                let bytes = std::fs::read(&lib)
                    .map_err(|e| OwnError::Library { path: lib.clone(), message: e.to_string() })?;
                let names = elf_function_symbols(&bytes)
                    .map_err(|message| OwnError::Library { path: lib.clone(), message })?;
                symbols.extend(names);
            }
        }
        Ok(OwnKernels {
            symbols,
            triton: cudal1_task::triton_kernels(source).into_iter().collect(),
            library: BTreeSet::new(),
        })
    }

    /// Whether the program builds no kernel at all: no `@triton.jit` function, and no function
    /// symbol in the extensions its evaluation built (none built, or every build failed: a
    /// program that falls back to PyTorch in an exception handler). Then none of its GPU time can
    /// be its own, and no profile can change that.
    #[must_use]
    pub fn defines_none(&self) -> bool {
        self.symbols.is_empty() && self.triton.is_empty()
    }

    /// Adds names that are a library's whatever the program defines (the reference's kernels).
    #[must_use]
    pub fn with_library(mut self, names: impl IntoIterator<Item = String>) -> OwnKernels {
        self.library.extend(names);
        self
    }

    /// Where the time of the kernel `name` counts.
    #[must_use]
    pub fn origin(&self, name: &str) -> Origin {
        let defined =
            self.symbols.contains(name) || self.triton.iter().any(|t| triton_name(name, t));
        match (defined, self.library.contains(name) || library_name(name)) {
            (true, true) => Origin::LibraryName,
            (true, false) => Origin::Own,
            (false, _) => Origin::Library,
        }
    }
}

/// Whether `kernel` is the Triton function `function`: the same name, or (older Triton) the name
/// with a specialisation suffix (`add_kernel_0d1d2de`).
fn triton_name(kernel: &str, function: &str) -> bool {
    kernel == function
        || kernel.strip_prefix(function).and_then(|r| r.strip_prefix('_')).is_some_and(|r| {
            r.starts_with(|c: char| c.is_ascii_digit())
                && r.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// Namespaces (mangled) whose kernels belong to PyTorch and CUDA's libraries.
const LIBRARY_NAMESPACES: [&str; 8] = [
    "_ZN2at",
    "_ZN3c10",
    "_ZN3cub",
    "_ZN6thrust",
    "_ZN5cudnn",
    "_ZN7cublas",
    "_ZN8cublasLt",
    "_ZN5torch",
];
/// Name prefixes of cuBLAS, cuDNN, cuFFT and Inductor kernels.
const LIBRARY_PREFIXES: [&str; 13] = [
    "ampere_",
    "volta_",
    "turing_",
    "maxwell_",
    "hopper_",
    "nvjet_",
    "xmma_",
    "cublas",
    "cudnn",
    "triton_poi_",
    "triton_red_",
    "triton_per_",
    "triton_tem_",
];
/// Parts of names of library kernels, mangled or not.
const LIBRARY_PARTS: [&str; 10] = [
    "gemv2",
    "gemvx",
    "gemmk1_kernel",
    "gemmSN_",
    "splitKreduce_kernel",
    "cutlass_7",
    "cutlass_8",
    "cutlass_9",
    "regular_fft",
    "vector_fft",
];

/// Whether `name` is in a library's namespace or named as a library's kernels are.
#[must_use]
pub fn library_name(name: &str) -> bool {
    if LIBRARY_NAMESPACES.iter().any(|n| name.starts_with(n))
        || LIBRARY_PREFIXES.iter().any(|p| name.starts_with(p))
        || LIBRARY_PARTS.iter().any(|p| name.contains(p))
    {
        return true;
    }
    // cuBLAS and cuDNN's `sm80_xmma_gemm_*`, `sm90_*`.
    name.strip_prefix("sm").is_some_and(|r| {
        let digits = r.chars().take_while(char::is_ascii_digit).count();
        digits >= 2 && r[digits..].starts_with('_')
    })
}

/// Splits `profile`'s time between the program's own kernels and the rest.
pub fn attribute(profile: &Profile, own: &OwnKernels) -> Result<OwnShare, OwnError> {
    if !profile.mangled {
        return Err(OwnError::NotMangled);
    }
    let kernels: Vec<AttributedKernel> = profile
        .kernels
        .iter()
        .map(|k| AttributedKernel {
            name: k.name.clone(),
            launches: k.launches,
            time_ns: k.time_ns,
            origin: own.origin(&k.name),
        })
        .collect();
    // Sums from +0.0: `Iterator::sum` of no float starts at -0.0, which the share, its JSON and
    // its percentage would carry as `-0`.
    let own_ns = kernels.iter().filter(|k| k.origin == Origin::Own).fold(0.0, |a, k| a + k.time_ns);
    let total_ns = kernels.iter().fold(0.0, |a, k| a + k.time_ns);
    Ok(OwnShare {
        share: if total_ns > 0.0 { own_ns / total_ns } else { 0.0 },
        own_ns,
        total_ns,
        calls: profile.calls,
        profiled_ms_per_call: total_ns / 1e6 / f64::from(profile.calls.max(1)),
        extension_symbols: own.symbols.len(),
        triton_kernels: own.triton.iter().cloned().collect(),
        kernels,
        profiled: true,
    })
}

/// The libraries of the published build in `dir`, as its record names them (inside `dir`).
fn published_libraries(dir: &Path) -> Result<Vec<std::path::PathBuf>, OwnError> {
    match crate::compile::published(dir) {
        None => return Err(OwnError::NotPublished(dir.to_owned())),
        // Its kernels came from a library only its own process saw.
        Some(missed) if !missed.is_empty() => return Err(OwnError::BuiltInItsProcess(missed)),
        Some(_) => {}
    }
    let not_published = || OwnError::NotPublished(dir.to_owned());
    let text =
        std::fs::read_to_string(dir.join(crate::compile::BUILDS)).map_err(|_| not_published())?;
    let builds: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_str(&text).map_err(|_| not_published())?;
    let mut libs: Vec<std::path::PathBuf> =
        builds.values().filter_map(|b| b["library"].as_str()).map(|l| dir.join(l)).collect();
    libs.sort();
    libs.dedup();
    Ok(libs)
}

/// Reads a little-endian number of `N` bytes at `at`.
/// The defined function symbols of an ELF file (its `.symtab` and `.dynsym`), read by `object`.
pub fn elf_function_symbols(b: &[u8]) -> Result<BTreeSet<String>, String> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let file = object::File::parse(b).map_err(|e| format!("not a readable object file: {e}"))?;
    if file.format() != object::BinaryFormat::Elf {
        return Err(format!("not an ELF file ({:?})", file.format()));
    }
    let mut names = BTreeSet::new();
    for symbol in file.symbols().chain(file.dynamic_symbols()) {
        if symbol.kind() != SymbolKind::Text || !symbol.is_definition() {
            continue;
        }
        if let Ok(name) = symbol.name() {
            if !name.is_empty() {
                names.insert(name.to_owned());
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{KernelLaunch, DURATION};

    fn launch(id: u64, name: &str, ns: f64) -> KernelLaunch {
        KernelLaunch {
            id,
            name: name.into(),
            block: String::new(),
            grid: String::new(),
            metrics: [(DURATION.to_owned(), ns)].into_iter().collect(),
        }
    }

    fn profile(kernels: &[(&str, f64)]) -> Profile {
        let launches: Vec<KernelLaunch> =
            kernels.iter().enumerate().map(|(i, (n, t))| launch(i as u64, n, *t)).collect();
        let mut p = Profile::from_launches(&launches, 2);
        p.mangled = true;
        p
    }

    #[test]
    fn own_time_is_what_the_program_built_and_the_rest_is_library() {
        let own = OwnKernels::from_names(
            ["_Z13matmul_tiledPKfS0_Pfiii".to_owned(), "_Z4mainv".to_owned()],
            ["fused_relu".to_owned()],
        );
        let p = profile(&[
            ("_Z13matmul_tiledPKfS0_Pfiii", 600.0),
            ("fused_relu_0d1d2de", 200.0),
            ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_", 150.0),
            ("ampere_sgemm_128x64_nn", 50.0),
        ]);
        let s = attribute(&p, &own).unwrap();
        assert_eq!((s.own_ns, s.total_ns, s.share), (800.0, 1000.0, 0.8));
        assert_eq!(s.profiled_ms_per_call, 1000.0 / 1e6 / 2.0);
        let origins: Vec<Origin> = s.kernels.iter().map(|k| k.origin).collect();
        assert_eq!(origins, [Origin::Own, Origin::Own, Origin::Library, Origin::Library]);
        assert_eq!(s.text(), "80% own (2 of 4 kernels)");
    }

    #[test]
    fn a_library_kernel_cannot_be_claimed_by_defining_its_name() {
        // The program defines functions named like cuBLAS's and PyTorch's kernels, and like a
        // kernel the reference launched; the launches of those names are the libraries'.
        let claimed = [
            "ampere_sgemm_128x64_nn",
            "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n",
            "_ZN2at6native13reduce_kernelILi512ELi1EEEvT0_",
            "gemm_from_reference",
        ];
        let own = OwnKernels::from_names(
            claimed.iter().map(|s| (*s).to_owned()),
            ["triton_poi_fused_add_0".to_owned()],
        )
        .with_library(["gemm_from_reference".to_owned()]);
        let mut kernels: Vec<(&str, f64)> = claimed.iter().map(|n| (*n, 100.0)).collect();
        kernels.push(("triton_poi_fused_add_0", 100.0));
        let s = attribute(&profile(&kernels), &own).unwrap();
        assert_eq!(s.share, 0.0, "{s:?}");
        // A plain zero: no own kernel is not `-0%` in the text, nor `-0.0` in the JSON.
        assert!(s.share.is_sign_positive() && s.own_ns.is_sign_positive(), "{s:?}");
        assert!(s.text().starts_with("0% own"), "{}", s.text());
        assert_eq!(serde_json::to_value(&s).unwrap()["share"].to_string(), "0.0");
        assert!(s.kernels.iter().all(|k| k.origin == Origin::LibraryName), "{s:?}");
        assert!(s.text().contains("5 of its own named like a library's"), "{}", s.text());
        // Honest names stay own.
        for name in ["_Z10sm_reducePf", "smem_tile_kernel", "my_gemv", "_Z6gemm_kPfS_S_iii"] {
            assert!(!library_name(name), "{name}");
        }
    }

    #[test]
    fn a_profile_with_short_names_is_not_attributed() {
        let mut p = profile(&[("k", 1.0)]);
        p.mangled = false;
        assert!(matches!(attribute(&p, &OwnKernels::default()), Err(OwnError::NotMangled)));
        // No kernel at all: no share, no division by zero.
        let s = attribute(&profile(&[]), &OwnKernels::default()).unwrap();
        assert_eq!(s.share, 0.0);
    }

    /// A program with `load_inline` whose every build failed (a fallback to PyTorch in an
    /// exception handler, as in many published kernels) builds no kernel: its share is 0 without a
    /// profile. One that built in its own process what the pool could not build ahead has kernels
    /// no published library names: no share, and a reason.
    #[test]
    fn failed_builds_count_as_no_kernel_and_builds_the_pool_missed_as_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let source = "from torch.utils.cpp_extension import load_inline\ntry:\n    ext = load_inline(name='k', cpp_sources='', cuda_sources='x')\nexcept Exception:\n    ext = None\n";
        let entry = dir.path().join("entry");
        std::fs::create_dir_all(&entry).unwrap();
        let marker = |missed: &str| {
            let text = format!(r#"{{"missed": [{missed}], "format": {}}}"#, crate::compile::FORMAT);
            std::fs::write(entry.join(crate::compile::BUILT), text).unwrap();
        };
        std::fs::write(entry.join(crate::compile::BUILDS), "{}").unwrap();
        marker("");
        let own = OwnKernels::of_program(Some(&entry), source).unwrap();
        assert!(own.defines_none(), "{own:?}");
        marker(r#""line 3 in ModelNew.forward""#);
        let err = OwnKernels::of_program(Some(&entry), source).unwrap_err();
        assert!(
            matches!(&err, OwnError::BuiltInItsProcess(m) if m == &["line 3 in ModelNew.forward"]),
            "{err}"
        );
        assert!(err.to_string().contains("could not build ahead"), "{err}");
    }

    #[test]
    fn a_program_that_defines_no_kernel_has_no_share_to_profile() {
        let plain = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n";
        let own = OwnKernels::of_program(None, plain).unwrap();
        assert!(own.defines_none(), "{own:?}");
        let s = OwnShare::of_none(&own);
        assert!(!s.profiled && s.kernels.is_empty(), "{s:?}");
        assert!(s.share == 0.0 && s.share.is_sign_positive(), "{s:?}");
        assert!(s.text().contains("not profiled"), "{}", s.text());
        // A Triton function, or one symbol of a published extension, is a kernel to look for.
        let triton = "import triton\n@triton.jit\ndef add_kernel(x):\n    pass\n";
        assert!(!OwnKernels::of_program(None, triton).unwrap().defines_none());
        assert!(!OwnKernels::from_names(["_Z1kPf".to_owned()], []).defines_none());
        // What an attribution gives for any profile of such a program: the same 0.
        let p = profile(&[("_ZN2at6native18elementwise_kernel", 300.0), ("my_kernel", 700.0)]);
        assert_eq!(attribute(&p, &own).unwrap().share, s.share);
        // Shares stored before this field were all profiled.
        let mut stored = serde_json::to_value(attribute(&p, &own).unwrap()).unwrap();
        stored.as_object_mut().unwrap().remove("profiled");
        assert!(serde_json::from_value::<OwnShare>(stored).unwrap().profiled);
    }

    #[test]
    fn triton_suffixes_are_matched_exactly() {
        assert!(triton_name("add_kernel", "add_kernel"));
        assert!(triton_name("add_kernel_0d1d2de", "add_kernel"));
        assert!(!triton_name("add_kernel_fast", "add_kernel"));
        assert!(!triton_name("add_kernel2", "add_kernel"));
    }

    #[test]
    fn malformed_elf_files_are_errors_not_panics() {
        assert!(elf_function_symbols(b"#!/bin/sh").is_err());
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 2;
        header[5] = 1;
        // Section headers far beyond the file, with a sane size.
        header[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        header[0x3A] = 64;
        header[0x3C] = 3;
        assert!(elf_function_symbols(&header).is_err());
    }

    #[test]
    fn a_real_binarys_defined_functions_are_read() {
        // This test binary is an ELF file whose symbol tables define its own functions (release
        // builds keep `.symtab`; `.dynsym` at least holds what it exports).
        let me = std::fs::read("/proc/self/exe").unwrap();
        let names = elf_function_symbols(&me).unwrap();
        assert!(!names.is_empty());
        assert!(
            names.iter().any(|n| n.contains("elf_function_symbols")) || names.contains("main"),
            "{} names, none of this crate's",
            names.len()
        );
        // Functions it only imports from libc are not defined here.
        assert!(!names.contains("malloc"), "an imported function counted as defined");
    }

    #[test]
    fn an_unpublished_build_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let src = "from torch.utils.cpp_extension import load_inline\n";
        assert!(matches!(
            OwnKernels::of_program(Some(dir.path()), src),
            Err(OwnError::NotPublished(_))
        ));
        // A program without extensions needs no build; its Triton kernels are its own.
        let triton = "import triton\n@triton.jit\ndef k(x):\n    pass\n";
        let own = OwnKernels::of_program(Some(dir.path()), triton).unwrap();
        assert_eq!(own.triton.iter().cloned().collect::<Vec<_>>(), ["k"]);
    }
}
