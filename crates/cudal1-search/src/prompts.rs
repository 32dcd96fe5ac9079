//! [`Prompts`]: the first-round, contrastive and refinement prompts, rendered from
//! minijinja templates that ship in the crate and can be overridden by a user.

use std::path::{Path, PathBuf};

use minijinja::value::{Serde, Value};
use minijinja::{context, syntax::SyntaxConfig, Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};

/// File names of the templates; a user directory may override any of them.
pub const TEMPLATE_NAMES: [&str; 4] = [FIRST, CONTRASTIVE, REFINE, RULES];
const FIRST: &str = "first.j2";
const CONTRASTIVE: &str = "contrastive.j2";
/// A later turn of a trajectory (`optimize --turns`): the previous attempt and its verdict.
const REFINE: &str = "refine.j2";
/// The rules both prompts state, included by each.
const RULES: &str = "rules.j2";

const BUILTIN: [(&str, &str); 4] = [
    (FIRST, include_str!("../templates/first.j2")),
    (CONTRASTIVE, include_str!("../templates/contrastive.j2")),
    (REFINE, include_str!("../templates/refine.j2")),
    (RULES, include_str!("../templates/rules.j2")),
];

/// The language the prompts ask programs to be written in; templates see it as `language`
/// (`"cuda"` or `"triton"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Custom CUDA through `load_inline`, or a faster PyTorch program (CUDA-L1's prompts).
    #[default]
    Cuda,
    /// Triton kernels (`@triton.jit`), launched from PyTorch.
    Triton,
}

impl Language {
    /// Its name as templates see it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Cuda => "cuda",
            Language::Triton => "triton",
        }
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An earlier variant shown in a contrastive prompt, with what it measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exemplar {
    pub code: String,
    /// Reference time divided by the variant's time.
    pub speedup: f64,
    /// The evaluator's verdict in words, e.g. `correct` or `correct, slower than the reference`.
    pub verdict: String,
    /// Where its GPU time goes (an Nsight Compute brief), when the prompt shows profiles
    /// (`optimize --profile`).
    pub profile: Option<String>,
}

impl Exemplar {
    /// A correct variant as prompts show it: its speedup, and whether it is slower than the
    /// reference.
    pub fn measured(code: String, speedup: f64) -> Exemplar {
        let verdict = if speedup < 1.0 { "correct, slower than the reference" } else { "correct" };
        Exemplar { code, speedup, verdict: verdict.to_owned(), profile: None }
    }
}

/// The previous turn of a trajectory as the refinement prompt shows it: the program (if the
/// reply held one) and what the evaluator said about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attempt {
    /// The 1-based turn that wrote it.
    pub turn: u32,
    /// `None`: the reply held no program.
    pub code: Option<String>,
    /// The verdict in words, e.g. `compile_error` or `no program`.
    pub verdict: String,
    /// Whether it is correct (the prompt then asks for more speed rather than a fix).
    pub correct: bool,
    /// One sentence: the speedup with its interval, or the reason in short.
    pub summary: String,
    /// The evidence, one line each: compiler error lines, the mismatch, findings.
    pub details: Vec<String>,
    /// Its Nsight Compute brief, when prompts show profiles.
    pub profile: Option<String>,
}

/// The reference program as a prompt shows it: its code, and its profile when prompts show
/// profiles. A `&str` is the code alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reference<'a> {
    pub code: &'a str,
    pub profile: Option<&'a str>,
}

impl<'a> From<&'a str> for Reference<'a> {
    fn from(code: &'a str) -> Self {
        Reference { code, profile: None }
    }
}

impl<'a> From<&'a String> for Reference<'a> {
    fn from(code: &'a String) -> Self {
        Reference { code, profile: None }
    }
}

/// What a template sees for one exemplar.
#[derive(Serialize)]
struct ExemplarView<'a> {
    code: &'a str,
    speedup: f64,
    speedup_text: String,
    verdict: &'a str,
    profile: Option<&'a str>,
}

impl<'a> From<&'a Exemplar> for ExemplarView<'a> {
    fn from(e: &'a Exemplar) -> Self {
        let speedup_text =
            if e.speedup.is_finite() { format!("{:.2}x", e.speedup) } else { "n/a".to_owned() };
        Self {
            code: e.code.trim_end(),
            speedup: e.speedup,
            speedup_text,
            verdict: &e.verdict,
            profile: e.profile.as_deref(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("template `{name}` ({origin}) is invalid")]
    Template {
        name: String,
        origin: String,
        #[source]
        source: minijinja::Error,
    },
    #[error("cannot read prompt templates from `{}`", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{}` holds none of the prompt templates ({})", dir.display(), TEMPLATE_NAMES.join(", "))]
    NoTemplates { dir: PathBuf },
    #[error(
        "a contrastive prompt needs at least one exemplar; use the first-round prompt instead"
    )]
    NoExemplars,
}

/// The prompt templates, ready to render, in the language they ask for ([`Prompts::language`]).
/// A clone holds the same templates, to ask for another language beside these.
#[derive(Debug, Clone)]
pub struct Prompts {
    env: Environment<'static>,
    /// Where each template came from, for error messages.
    origins: Vec<(&'static str, String)>,
    language: Language,
}

impl Prompts {
    /// The templates shipped in the crate.
    pub fn builtin() -> Self {
        let sources =
            BUILTIN.iter().map(|(n, s)| (*n, (*s).to_owned(), "built in".to_owned())).collect();
        Self::build(sources).expect("the built-in templates are valid (tested)")
    }

    /// The templates in `dir` (any of `first.j2`, `contrastive.j2`, `refine.j2`, `rules.j2`),
    /// with built-in ones for those it lacks. Every template is test-rendered
    /// here, so a mistake shows now with its file name, not mid-search.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, PromptError> {
        let dir = dir.as_ref();
        std::fs::read_dir(dir)
            .map_err(|source| PromptError::Io { path: dir.to_owned(), source })?;
        let mut sources = Vec::new();
        let mut found = 0;
        for (name, builtin) in BUILTIN {
            let path = dir.join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    found += 1;
                    sources.push((name, text, format!("`{}`", path.display())));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    sources.push((name, builtin.to_owned(), "built in".to_owned()));
                }
                Err(source) => return Err(PromptError::Io { path, source }),
            }
        }
        if found == 0 {
            return Err(PromptError::NoTemplates { dir: dir.to_owned() });
        }
        Self::build(sources)
    }

    fn build(sources: Vec<(&'static str, String, String)>) -> Result<Self, PromptError> {
        let mut env = Environment::new();
        // A misspelt variable must fail loudly rather than vanish from the prompt.
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_syntax(
            SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .expect("valid syntax"),
        );
        let mut origins = Vec::new();
        for (name, text, origin) in sources {
            env.add_template_owned(name, text).map_err(|source| PromptError::Template {
                name: name.to_owned(),
                origin: origin.clone(),
                source,
            })?;
            origins.push((name, origin));
        }
        let mut prompts = Self { env, origins, language: Language::Cuda };
        for language in [Language::Triton, Language::Cuda] {
            prompts.set_language(language);
            prompts.probe()?;
        }
        Ok(prompts)
    }

    /// The same templates asking for programs in `language` (the default is CUDA).
    #[must_use]
    pub fn language(mut self, language: Language) -> Self {
        self.set_language(language);
        self
    }

    /// The language these prompts ask for.
    pub fn asks_for(&self) -> Language {
        self.language
    }

    fn set_language(&mut self, language: Language) {
        self.env.add_global("language", Value::from(language.as_str()));
        self.language = language;
    }

    /// Renders every template once, so that a mistake shows with its file name when the
    /// templates are loaded, not mid-search.
    fn probe(&self) -> Result<(), PromptError> {
        let prompts = self;
        prompts.first("class Model: pass")?;
        let probe = Exemplar {
            code: "class ModelNew: pass".to_owned(),
            speedup: 1.0,
            verdict: "correct".to_owned(),
            profile: None,
        };
        prompts.contrastive("class Model: pass", &[probe])?;
        // With profiles too: a template that uses them must render them.
        let probe = Exemplar {
            profile: Some("1 kernel launch".to_owned()),
            ..Exemplar::measured("class ModelNew: pass".to_owned(), 1.0)
        };
        let reference = Reference { code: "class Model: pass", profile: Some("1 kernel launch") };
        prompts.first(reference)?;
        prompts.contrastive(reference, std::slice::from_ref(&probe))?;
        // A refinement with and without exemplars, code, details and profiles.
        let previous = Attempt {
            turn: 1,
            code: Some("class ModelNew: pass".to_owned()),
            verdict: "incorrect".to_owned(),
            correct: false,
            summary: "output 0 differs".to_owned(),
            details: vec!["max abs error 1.0".to_owned()],
            profile: Some("1 kernel launch".to_owned()),
        };
        prompts.refine(reference, &[probe], &previous)?;
        let bare =
            Attempt { code: None, details: vec![], profile: None, correct: true, ..previous };
        prompts.refine("class Model: pass", &[], &bare)?;
        Ok(())
    }

    fn render(&self, name: &'static str, ctx: Value) -> Result<String, PromptError> {
        let origin = || {
            self.origins
                .iter()
                .find(|(n, _)| *n == name)
                .map_or_else(String::new, |(_, o)| o.clone())
        };
        let template = self.env.get_template(name).map_err(|source| PromptError::Template {
            name: name.to_owned(),
            origin: origin(),
            source,
        })?;
        template.render(ctx).map_err(|source| PromptError::Template {
            name: name.to_owned(),
            origin: origin(),
            source,
        })
    }

    /// The first-round prompt: the reference program alone (with its profile, if given).
    pub fn first<'r>(&self, reference: impl Into<Reference<'r>>) -> Result<String, PromptError> {
        let r = reference.into();
        self.render(
            FIRST,
            context! { reference => r.code.trim_end(), reference_profile => r.profile },
        )
    }

    /// The contrastive prompt: the reference and earlier variants with their
    /// measured speedups (and profiles, if given), in the order given.
    pub fn contrastive<'r>(
        &self,
        reference: impl Into<Reference<'r>>,
        exemplars: &[Exemplar],
    ) -> Result<String, PromptError> {
        if exemplars.is_empty() {
            return Err(PromptError::NoExemplars);
        }
        let r = reference.into();
        let views: Vec<ExemplarView<'_>> = exemplars.iter().map(ExemplarView::from).collect();
        self.render(
            CONTRASTIVE,
            context! { reference => r.code.trim_end(), reference_profile => r.profile, exemplars => Value::from(Serde(&views)) },
        )
    }

    /// The prompt of a later turn of a trajectory: the reference, the exemplars its first turn
    /// showed (none for a first-round prompt), and the previous attempt with its verdict.
    pub fn refine<'r>(
        &self,
        reference: impl Into<Reference<'r>>,
        exemplars: &[Exemplar],
        previous: &Attempt,
    ) -> Result<String, PromptError> {
        let r = reference.into();
        let views: Vec<ExemplarView<'_>> = exemplars.iter().map(ExemplarView::from).collect();
        let previous = Attempt {
            code: previous.code.as_deref().map(|c| c.trim_end().to_owned()),
            ..previous.clone()
        };
        self.render(
            REFINE,
            context! {
                reference => r.code.trim_end(),
                reference_profile => r.profile,
                exemplars => Value::from(Serde(&views)),
                previous => Value::from(Serde(&previous)),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE: &str = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n";

    fn exemplar(code: &str, speedup: f64, verdict: &str) -> Exemplar {
        Exemplar { code: code.to_owned(), speedup, verdict: verdict.to_owned(), profile: None }
    }

    #[test]
    fn first_prompt_holds_the_reference_and_the_rules() {
        let p = Prompts::builtin().first(REFERENCE).unwrap();
        assert!(p.contains("```python\nimport torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n```"), "{p}");
        assert!(p.contains("class ModelNew(nn.Module)"));
        assert!(p.contains("load_inline"));
        assert!(p.contains("ONE ```python"));
        assert!(
            p.contains("plain PyTorch.\n\nStart with a short plan"),
            "rules and the closing paragraph stay apart"
        );
        assert!(!p.contains("{{") && !p.contains("{%"));
    }

    #[test]
    fn profiles_are_shown_only_when_given() {
        let prompts = Prompts::builtin();
        let plain = prompts.first(REFERENCE).unwrap();
        assert!(!plain.contains("Nsight Compute"), "{plain}");
        let reference =
            Reference { code: REFERENCE, profile: Some("2 kernel launches, 40 µs\n- 90% `gemm`") };
        let first = prompts.first(reference).unwrap();
        assert!(first.contains("```\n\nNsight Compute profiled the reference on the GPU:\n\n2 kernel launches, 40 µs\n- 90% `gemm`\n\nWrite a new program"), "{first}");
        let ex = [
            Exemplar {
                profile: Some("1 kernel launch, 12 µs".to_owned()),
                ..exemplar("class ModelNew: a = 1", 2.0, "correct")
            },
            exemplar("class ModelNew: b = 1", 1.5, "correct"),
        ];
        let c = prompts.contrastive(reference, &ex).unwrap();
        assert!(c.contains("class ModelNew: a = 1\n```\n\nNsight Compute profile of variant 1:\n\n1 kernel launch, 12 µs\n"), "{c}");
        assert!(!c.contains("profile of variant 2"), "{c}");
        assert!(c.contains("Nsight Compute profiled the reference"));
    }

    #[test]
    fn contrastive_prompt_lists_variants_with_speedups_in_order() {
        let ex = [
            exemplar("class ModelNew: slow = 1\n", 0.8, "correct, slower"),
            exemplar("class ModelNew: fast = 1", 2.345, "correct"),
        ];
        let p = Prompts::builtin().contrastive(REFERENCE, &ex).unwrap();
        let v1 = p.find("### Variant 1: speedup 0.80x (correct, slower)").expect(&p);
        let v2 = p.find("### Variant 2: speedup 2.35x (correct)").expect(&p);
        assert!(v1 < v2);
        assert!(p.contains("```python\nclass ModelNew: slow = 1\n```"));
        assert!(p[v2..].contains("class ModelNew: fast = 1"));
        for needle in [
            "Performance analysis",
            "Algorithm design",
            "ONE ```python",
            "cache",
            "TF32",
            "get_inputs",
        ] {
            assert!(p.contains(needle), "missing {needle}");
        }
        // Parts come in the asked order.
        assert!(
            p.find("1. Performance analysis").unwrap() < p.find("2. Algorithm design").unwrap()
        );
        assert!(p.find("2. Algorithm design").unwrap() < p.find("3. Code").unwrap());
    }

    fn attempt(correct: bool) -> Attempt {
        Attempt {
            turn: 2,
            code: Some("class ModelNew: broken = 1\n".to_owned()),
            verdict: if correct { "correct" } else { "compile_error" }.to_owned(),
            correct,
            summary: if correct {
                "speedup 1.40x (95% CI 1.30x to 1.50x)"
            } else {
                "the extension does not build"
            }
            .to_owned(),
            details: if correct {
                vec![]
            } else {
                vec!["k.cu(3): error: identifier \"x\" is undefined".to_owned()]
            },
            profile: None,
        }
    }

    #[test]
    fn refinement_shows_the_previous_attempt_with_its_verdict_and_evidence() {
        let prompts = Prompts::builtin();
        let p = prompts.refine(REFERENCE, &[], &attempt(false)).unwrap();
        assert!(p.contains("return x * 2\n```"), "{p}");
        assert!(!p.contains("Earlier attempts"), "no exemplars, no exemplar section: {p}");
        assert!(
            p.contains(
                "## Your previous attempt (turn 2)\n\n```python\nclass ModelNew: broken = 1\n```\n"
            ),
            "{p}"
        );
        assert!(
            p.contains("verdict on your previous attempt: compile_error. the extension does not build\n\n```text\nk.cu(3): error: identifier \"x\" is undefined\n```\n"),
            "{p}"
        );
        assert!(p.contains("Fix what the evaluator found"), "{p}");
        assert!(p.contains("why?\n2. Design."), "{p}");
        assert!(p.contains("class ModelNew(nn.Module)"), "the rules follow");
        assert!(!p.contains("{{") && !p.contains("{%"));

        let ex = [exemplar("class ModelNew: fast = 1", 2.0, "correct")];
        let c = prompts
            .refine(
                REFERENCE,
                &ex,
                &Attempt { profile: Some("3 kernel launches".into()), ..attempt(true) },
            )
            .unwrap();
        assert!(c.contains("### Variant 1: speedup 2.00x (correct)"), "{c}");
        assert!(c.find("### Variant 1").unwrap() < c.find("## Your previous attempt").unwrap());
        assert!(
            !c.contains("compile_error")
                && c.contains(": correct. speedup 1.40x (95% CI 1.30x to 1.50x)\n"),
            "{c}"
        );
        assert!(!c.contains("```text"), "no details, no block: {c}");
        assert!(c.contains("profile of your previous attempt:\n\n3 kernel launches\n"), "{c}");
        assert!(c.contains("is correct. Write a program that is faster still"), "{c}");

        let none = prompts
            .refine(
                REFERENCE,
                &[],
                &Attempt { code: None, verdict: "no program".into(), ..attempt(false) },
            )
            .unwrap();
        assert!(none.contains("Your previous reply held no program."), "{none}");
    }

    #[test]
    fn triton_prompts_ask_for_triton_kernels_instead_of_cuda_extensions() {
        let cuda = Prompts::builtin();
        assert_eq!(cuda.asks_for(), Language::Cuda);
        let triton = Prompts::builtin().language(Language::Triton);
        assert_eq!(triton.asks_for(), Language::Triton);
        let ex = [exemplar("class ModelNew: fast = 1", 2.0, "correct")];
        let rendered = |p: &Prompts| {
            [
                p.first(REFERENCE).unwrap(),
                p.contrastive(REFERENCE, &ex).unwrap(),
                p.refine(REFERENCE, &ex, &attempt(true)).unwrap(),
            ]
        };
        for p in rendered(&triton) {
            assert!(
                p.starts_with(
                    "You are an expert in GPU performance engineering with PyTorch and Triton.\n"
                ),
                "{p}"
            );
            assert!(p.contains("@triton.jit") && p.contains("import triton.language as tl"), "{p}");
            assert!(p.contains("Do not build CUDA C++ extensions"), "{p}");
            assert!(!p.contains("are welcome, and so is a faster formulation"), "{p}");
            assert!(!p.contains("{{") && !p.contains("{%"), "{p}");
        }
        for p in rendered(&cuda) {
            assert!(
                p.starts_with(
                    "You are an expert in GPU performance engineering with PyTorch and CUDA.\n"
                ),
                "{p}"
            );
            assert!(p.contains("are welcome, and so is a faster formulation in plain PyTorch."));
            assert!(!p.contains("triton"), "{p}");
        }
        // The rules end where they did: the closing paragraph stays one blank line apart.
        let first = triton.first(REFERENCE).unwrap();
        assert!(first.contains("not timed.\n\nStart with a short plan"), "{first}");
    }

    #[test]
    fn a_clone_asks_for_its_own_language_and_languages_read_by_their_names() {
        let cuda = Prompts::builtin();
        let triton = cuda.clone().language(Language::Triton);
        assert!(triton.first(REFERENCE).unwrap().contains("@triton.jit"));
        assert!(!cuda.first(REFERENCE).unwrap().contains("triton"), "the original is unchanged");
        let read = |s: &str| serde_json::from_value::<Language>(serde_json::json!(s));
        assert_eq!(read("triton").unwrap(), Language::Triton);
        assert_eq!(read("cuda").unwrap(), Language::Cuda);
        assert!(read("rust").unwrap_err().to_string().contains("expected `cuda` or `triton`"));
    }

    #[test]
    fn a_users_template_may_ask_for_the_language() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rules.j2"), "Write {{ language }} kernels.").unwrap();
        let p = Prompts::from_dir(dir.path()).unwrap().language(Language::Triton);
        assert!(p.first(REFERENCE).unwrap().contains("Write triton kernels."));
    }

    #[test]
    fn non_finite_speedups_are_shown_as_na() {
        let p = Prompts::builtin()
            .contrastive(REFERENCE, &[exemplar("x", f64::NAN, "timed out")])
            .unwrap();
        assert!(p.contains("speedup n/a (timed out)"));
    }

    #[test]
    fn contrastive_without_exemplars_is_refused() {
        assert!(matches!(
            Prompts::builtin().contrastive(REFERENCE, &[]),
            Err(PromptError::NoExemplars)
        ));
    }

    #[test]
    fn reference_text_is_not_interpreted_as_a_template() {
        let tricky = "x = '{{ not_a_var }}'  # {% if %}";
        let p = Prompts::builtin().first(tricky).unwrap();
        assert!(p.contains(tricky));
    }
}
