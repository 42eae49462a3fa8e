//! Protected paths must not break the tools agents use (issue 14): in a real git repository
//! without `AGENTS.md`, `CLAUDE.md`, `.github` or `.loopwright/policies`, `palisade run` gives
//! `git status --porcelain`, `git add -A`, `git commit`, `git stash`, `git stash -u`,
//! `git stash pop` and `git clean` exactly the output they give outside and leaves the same
//! trees behind, while every missing protected path still cannot be created, written, renamed
//! onto, linked at or reached by renaming its parent, and the workspace holds nothing afterwards
//! that the run put there — also when two runs share it and the one that came first leaves
//! first, and when 20 runs start and end in it at once.
//!
//! For linux-bwrap and docker, as root and as uid 65534 (via `setpriv`, when the test runs as
//! root). Docker runs the image of tests/support/docker_image.rs with the host's `git` and its
//! libraries added (`ensure_with_git`), so both sides run the same git binary. Without a daemon
//! the docker half says so and passes, unless `PALISADE_REQUIRE_DOCKER=1`.
//!
//! Runs that must overlap meet the test through FIFOs in the repository's `.git/` ([`Meeting`]),
//! never through a clock. Every file is the test's own: repositories in a fresh directory under
//! cargo's target dir (or `reachable::FALLBACK`), the palisade binary copied there when uid 65534
//! could not run it in place.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed step should fail the test loudly"
)]

#[path = "support/docker_image.rs"]
mod docker_image;
#[path = "support/escape_kit.rs"]
mod escape_kit;
#[path = "support/reachable.rs"]
mod reachable;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;

use escape_kit::User;

/// The protected paths every run gets (the engine's built-ins), relative to the workspace.
const PROTECTED: [&str; 4] = [".github", ".loopwright/policies", "AGENTS.md", "CLAUDE.md"];

/// The git sequence; every command's output and status, and the porcelain status after each.
const GIT_SEQUENCE: &str = r#"
show() { echo "-- $1 rc=$2"; git status --porcelain 2>&1; }
git status --porcelain 2>&1; echo "-- status rc=$?"
echo change >> tracked.txt; echo new > untracked.txt
git add -A 2>&1; show add $?
git commit -q -m x 2>&1; show commit $?
echo more >> tracked.txt
git stash -q 2>&1; show stash $?
echo again >> tracked.txt; echo fresh > fresh.txt; mkdir -p sub; echo deep > sub/file.txt
git stash -u -q 2>&1; show stash-u $?
git stash pop -q 2>&1; show pop $?
git stash list --format=%gd 2>&1; git log --format=%s 2>&1
git ls-files 2>&1; git status --porcelain --ignored -uall 2>&1
git clean -ndx 2>&1; git clean -fdx -q 2>&1; show clean-fdx $?
echo trees; git rev-parse 'HEAD^{tree}' 'stash@{0}^{tree}' 'stash@{0}^2^{tree}' 2>&1
echo end
"#;

/// The repository's state as the host sees it after a run: what git reports and the trees it
/// holds (commit ids differ with the clock, trees do not).
const REPO_STATE: &str = "git status --porcelain --ignored -uall; git stash list --format=%gd; \
    git log --format=%s; git rev-parse 'HEAD^{tree}'; \
    git for-each-ref --format='%(refname)' refs/stash; git rev-parse -q --verify 'stash@{0}^{tree}'; \
    echo end";

/// One attack on the missing protected paths per line, each printing `ok:<name>` if it worked
/// and then undoing what it did (outside; inside nothing may have worked).
const ATTACKS: &str = r#"
try() { if (eval "$2") >/dev/null 2>&1; then echo "ok:$1"; fi; (eval "$3") >/dev/null 2>&1; }
try rm-agents 'rm AGENTS.md' ''
try rename-away-agents 'mv AGENTS.md gone.tmp' 'rm -f gone.tmp'
try create-agents 'echo x > AGENTS.md' 'rm -f AGENTS.md'
try append-claude 'echo x >> CLAUDE.md' 'rm -f CLAUDE.md'
try create-excl-claude 'set -C; echo x > CLAUDE.md' 'rm -f CLAUDE.md'
try mkdir-agents 'mkdir AGENTS.md' 'rmdir AGENTS.md'
try mkdir-github 'mkdir .github' 'rmdir .github'
try create-workflow 'mkdir -p .github/workflows && echo x > .github/workflows/x.yml' 'rm -rf .github'
try rename-onto-agents 'echo x > f.tmp && mv -f f.tmp AGENTS.md' 'rm -f f.tmp AGENTS.md'
try rename-dir-onto-github 'mkdir -p d.tmp/workflows && mv d.tmp .github' 'rm -rf d.tmp .github'
try symlink-agents 'ln -s tracked.txt AGENTS.md' 'rm -f AGENTS.md'
try symlink-github 'ln -s sub-link .github' 'rm -f .github'
try hardlink-claude 'ln tracked.txt CLAUDE.md' 'rm -f CLAUDE.md'
try create-policy 'mkdir -p .loopwright/policies && echo x > .loopwright/policies/p.yaml' 'rm -rf .loopwright/policies'
try rename-parent-loopwright 'mv .loopwright lw.tmp && mkdir -p .loopwright/policies && echo x > .loopwright/policies/p.yaml' '[ -d lw.tmp ] && rm -rf .loopwright && mv lw.tmp .loopwright'
try rename-workspace 'mv "$PWD" "$PWD.moved"' '[ -d "$PWD.moved" ] && mv "$PWD.moved" "$PWD"'
echo end
"#;

/// The attacks that must work outside (the others need the path to exist).
const WORKS_OUTSIDE: [&str; 14] = [
    "create-agents",
    "append-claude",
    "create-excl-claude",
    "mkdir-agents",
    "mkdir-github",
    "create-workflow",
    "rename-onto-agents",
    "rename-dir-onto-github",
    "symlink-agents",
    "symlink-github",
    "hardlink-claude",
    "create-policy",
    "rename-parent-loopwright",
    "rename-workspace",
];

/// What 20 runs at once try (no scratch files: each run's `git status` would see the others').
const PARALLEL_ATTACKS: &str = r#"
try() { if (eval "$2") >/dev/null 2>&1; then echo "ok:$1"; fi; (eval "$3") >/dev/null 2>&1; }
try create-agents 'echo x > AGENTS.md' 'rm -f AGENTS.md'
try create-excl-claude 'set -C; echo x > CLAUDE.md' 'rm -f CLAUDE.md'
try mkdir-github 'mkdir .github' 'rmdir .github'
try symlink-agents 'ln -s tracked.txt AGENTS.md' 'rm -f AGENTS.md'
try create-policy 'mkdir -p .loopwright/policies && echo x > .loopwright/policies/p.yaml' 'rm -rf .loopwright'
echo end
"#;

/// How many runs [`parallel_runs`] starts in one workspace.
const PARALLEL: usize = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Bwrap,
    Docker,
}

/// Who runs, under which backend, with which binaries.
struct Runner {
    user: User,
    backend: Backend,
    /// The supplementary groups (the docker socket's group for uid 65534).
    groups: Vec<u32>,
    palisade: PathBuf,
    base: tempfile::TempDir,
    /// `--runtime-profiles` and `--docker-socket` for docker.
    docker: Option<(PathBuf, PathBuf)>,
}

impl Runner {
    fn new(user: User, backend: Backend) -> Option<Runner> {
        let root =
            reachable::reachable_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "protected-git");
        let palisade = escape_kit::palisade_binary().unwrap();
        let palisade = reachable::reachable_binary(&palisade, &root);
        let base = tempfile::Builder::new()
            .prefix(&format!("u{}-{backend:?}-", user.uid()))
            .tempdir_in(&root)
            .unwrap();
        escape_kit::chmod(base.path(), 0o755);
        // `repos` is the user's, so that it may rename a workspace in it (outside).
        for dir in ["home", "cache", "repos"] {
            std::fs::create_dir(base.path().join(dir)).unwrap();
        }
        escape_kit::chmod(&base.path().join("cache"), 0o700);
        let mut runner = Runner {
            user,
            backend,
            groups: Vec::new(),
            palisade,
            base,
            docker: None,
        };
        if backend == Backend::Docker {
            let image = match docker_image::ensure_with_git() {
                Ok(image) => image,
                Err(why) => {
                    assert!(
                        !docker_image::required(),
                        "PALISADE_REQUIRE_DOCKER=1 but: {why}"
                    );
                    eprintln!("docker skipped: {why}");
                    return None;
                }
            };
            use std::os::unix::fs::MetadataExt;
            if user == User::Nobody {
                let gid = std::fs::metadata(&image.socket).unwrap().gid();
                if gid == 0 {
                    eprintln!("docker as uid 65534 skipped: the socket belongs to root's group");
                    return None;
                }
                runner.groups = vec![gid];
            }
            let profiles = runner.path("profiles.yaml");
            image.write_profile(&profiles, &[]);
            escape_kit::chmod(&profiles, 0o644);
            runner.docker = Some((profiles, image.socket.clone()));
        }
        runner.write_taskpack();
        for dir in ["home", "cache", "repos"] {
            escape_kit::chown_tree(&runner.path(dir), user);
        }
        Some(runner)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.base.path().join(rel)
    }

    fn label(&self) -> String {
        format!("{:?} as {}", self.backend, self.user.label())
    }

    fn write_taskpack(&self) {
        let backend = match self.backend {
            Backend::Bwrap => "linux-bwrap",
            Backend::Docker => "docker",
        };
        let path = self.path("taskpack.yaml");
        std::fs::write(
            &path,
            format!(
                "apiVersion: loopwright.dev/v1alpha1\nkind: Taskpack\nmetadata:\n  name: protected-git\nspec:\n  sandbox:\n    preferredBackends: [{backend}]\n    networkMode: none\n    requiredCapabilities: [protectedPathReadOnlyMask]\n"
            ),
        )
        .unwrap();
        escape_kit::chmod(&path, 0o644);
    }

    /// `argv` as this user (and groups), in `dir`, with a fixed small environment.
    fn command(&self, argv: &[&str], dir: &Path) -> Command {
        let mut full = self.user.wrap_in_groups(&self.groups);
        full.extend(argv.iter().map(|a| (*a).to_owned()));
        let mut command = Command::new(&full[0]);
        command
            .args(&full[1..])
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.path("home"))
            .env("LANG", "C")
            .env("PALISADE_CACHE_DIR", self.path("cache"))
            // The test's directories may lie inside a checkout (cargo's target dir): git run
            // in a workspace that is no repository must not climb into it.
            .env("GIT_CEILING_DIRECTORIES", self.path("repos"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// `sh -c script` in `ws`, unconfined.
    fn outside(&self, script: &str, ws: &Path) -> Output {
        self.command(&["sh", "-c", script], ws).output().unwrap()
    }

    /// `palisade run … -- sh -c script` with `ws` as the workspace.
    fn inside_command(&self, script: &str, ws: &Path) -> Command {
        self.inside_command_with(&[], script, ws)
    }

    /// [`Runner::inside_command`] with more options for `run` (before the `--`).
    fn inside_command_with(&self, extra: &[&str], script: &str, ws: &Path) -> Command {
        let palisade = self.palisade.display().to_string();
        let taskpack = self.path("taskpack.yaml").display().to_string();
        let workspace = ws.display().to_string();
        let mut argv = vec![
            palisade.as_str(),
            "run",
            "--taskpack",
            &taskpack,
            "--workspace",
            &workspace,
        ];
        let docker: Vec<String> = match &self.docker {
            Some((profiles, socket)) => vec![
                "--runtime-profiles".into(),
                profiles.display().to_string(),
                "--docker-socket".into(),
                socket.display().to_string(),
            ],
            None => Vec::new(),
        };
        argv.extend(docker.iter().map(String::as_str));
        argv.extend(extra);
        argv.extend(["--", "sh", "-c", script]);
        self.command(&argv, ws)
    }

    fn inside(&self, script: &str, ws: &Path) -> Output {
        let out = self.inside_command(script, ws).output().unwrap();
        assert_ne!(
            out.status.code(),
            Some(125),
            "{}: palisade refused or failed to launch: {}",
            self.label(),
            text(&out.stderr)
        );
        out
    }

    /// A repository at `<base>/repos/<name>`: one commit of `tracked.txt` (and, with
    /// `loopwright`, of `.loopwright/notes.md`, so `.loopwright/policies` is missing below an
    /// existing directory rather than with it), none of the protected paths, owned by this user.
    fn repository(&self, name: &str, loopwright: bool) -> PathBuf {
        let ws = self.path("repos").join(name);
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("tracked.txt"), "one\n").unwrap();
        if loopwright {
            std::fs::create_dir(ws.join(".loopwright")).unwrap();
            std::fs::write(ws.join(".loopwright/notes.md"), "notes\n").unwrap();
        }
        escape_kit::chown_tree(&ws, self.user);
        let script = "git init -q && git config user.name Test && git config user.email t@example.com \
                      && git config commit.gpgsign false && git add -A && git commit -q -m init";
        let out = self.outside(script, &ws);
        assert!(out.status.success(), "git init: {}", text(&out.stderr));
        ws
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The names in `dir`, sorted (`.git` included); empty when it does not exist.
fn entries(dir: &Path) -> BTreeSet<String> {
    match std::fs::read_dir(dir) {
        Ok(read) => read
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
        Err(e) => panic!("{}: {e}", dir.display()),
    }
}

/// Every missing protected path is still missing on the host, and `ws` holds what `like` (a
/// repository of the same shape that no sandbox touched) holds: nothing of a run is left.
fn assert_no_leftover(runner: &Runner, ws: &Path, like: &Path) {
    for rel in PROTECTED {
        assert!(
            std::fs::symlink_metadata(ws.join(rel)).is_err(),
            "{}: `{rel}` exists on the host after the run",
            runner.label()
        );
    }
    for dir in [".", ".loopwright"] {
        assert_eq!(
            entries(&ws.join(dir)),
            entries(&like.join(dir)),
            "{}: leftover in `{dir}` of the workspace",
            runner.label()
        );
    }
}

fn runners(backend: Backend) -> Vec<Runner> {
    let mut users = Vec::new();
    users.extend(escape_kit::root_user());
    users.push(escape_kit::unprivileged_user());
    if escape_kit::test_uid() != 0 {
        eprintln!("not root: the root pass is skipped");
    }
    users
        .into_iter()
        .filter_map(|user| Runner::new(user, backend))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// git behaves as outside, nothing can be created, nothing is left

fn git_and_protection(backend: Backend) {
    for runner in runners(backend) {
        for loopwright in [true, false] {
            let shape = if loopwright { "" } else { "-bare" };
            let outside_ws = runner.repository(&format!("outside{shape}"), loopwright);
            let inside_ws = runner.repository(&format!("inside{shape}"), loopwright);
            let label = format!(
                "{} ({})",
                runner.label(),
                if loopwright {
                    "with .loopwright"
                } else {
                    "without .loopwright"
                }
            );

            let outside = runner.outside(GIT_SEQUENCE, &outside_ws);
            assert!(
                text(&outside.stdout).ends_with("end\n"),
                "{}",
                text(&outside.stderr)
            );
            let inside = runner.inside(GIT_SEQUENCE, &inside_ws);
            assert_eq!(
                text(&inside.stdout),
                text(&outside.stdout),
                "{label}: git behaves differently inside (stderr: {})",
                text(&inside.stderr)
            );
            assert_eq!(inside.status.code(), Some(0), "{label}");
            assert_no_leftover(&runner, &inside_ws, &outside_ws);
            // The host's view of the repository after the run is the outside one's.
            assert_eq!(
                text(&runner.outside(REPO_STATE, &inside_ws).stdout),
                text(&runner.outside(REPO_STATE, &outside_ws).stdout),
                "{label}"
            );

            // Every attack works on a scratch repository outside...
            let scratch = runner.repository(&format!("scratch{shape}"), loopwright);
            let control = text(&runner.outside(ATTACKS, &scratch).stdout);
            for attack in WORKS_OUTSIDE {
                // Renaming `.loopwright` away needs one.
                if attack == "rename-parent-loopwright" && !loopwright {
                    continue;
                }
                assert!(
                    control.contains(&format!("ok:{attack}\n")),
                    "{label}: {attack} does not work outside: {control}"
                );
            }
            // ...and none inside; nothing reaches the host.
            let attacked = runner.inside(ATTACKS, &inside_ws);
            let out = text(&attacked.stdout);
            assert!(
                out.ends_with("end\n"),
                "{label}: {}",
                text(&attacked.stderr)
            );
            assert!(
                !out.contains("ok:"),
                "{label}: attacks worked inside: {out}"
            );
            assert_no_leftover(&runner, &inside_ws, &outside_ws);
            eprintln!("{label}: git as outside, protected paths held, nothing left");
        }
    }
}

#[test]
fn bwrap_git_works_as_outside_and_missing_protected_paths_stay_missing() {
    git_and_protection(Backend::Bwrap);
}

#[test]
fn docker_git_works_as_outside_and_missing_protected_paths_stay_missing() {
    git_and_protection(Backend::Docker);
}

// ---------------------------------------------------------------------------------------------
// Runs that share a workspace

/// Where the test meets the runs it started, without a clock: FIFOs in the repository's `.git/`
/// (the sandbox reaches them through the workspace; git ignores them). A run says it is ready
/// with a line in `.git/ready`; it waits at a gate by opening the gate's FIFO *before* saying
/// so (`exec 3<.git/gate-NAME`) and reading it to its end (`cat <&3`), which comes when the test
/// drops the [`Gate`], the FIFO's only writer. Every run is waited for by a thread that writes
/// `exited NAME` to `.git/ready`, so a run that fails before it is ready ends the wait.
struct Meeting {
    git: PathBuf,
    /// `.git/ready`, opened for reading and writing: never end-of-file, never blocking an
    /// opener.
    ready: BufReader<File>,
    runs: BTreeMap<String, JoinHandle<Output>>,
}

/// The write end of a gate: dropping it lets every run waiting there go on.
struct Gate(#[allow(dead_code, reason = "held for its drop")] File);

impl Meeting {
    fn new(runner: &Runner, ws: &Path) -> Meeting {
        let git = ws.join(".git");
        let out = runner.outside("mkfifo .git/ready", ws);
        assert!(out.status.success(), "mkfifo: {}", text(&out.stderr));
        Meeting {
            ready: BufReader::new(fifo(&git.join("ready"))),
            git,
            runs: BTreeMap::new(),
        }
    }

    /// A gate runs open as `.git/gate-NAME`; made by the runner's user so its runs can read it.
    fn gate(&self, runner: &Runner, name: &str) -> Gate {
        let ws = self.git.parent().unwrap();
        let out = runner.outside(&format!("mkfifo .git/gate-{name}"), ws);
        assert!(out.status.success(), "mkfifo: {}", text(&out.stderr));
        Gate(fifo(&self.git.join(format!("gate-{name}"))))
    }

    /// Starts `command` as the run `name`; its pid (palisade's: `setpriv` execs it).
    fn spawn(&mut self, name: &str, mut command: Command) -> u32 {
        let child = command.spawn().unwrap();
        let pid = child.id();
        let mut notify = self.ready.get_ref().try_clone().unwrap();
        let line = format!("exited {name}\n");
        let thread = std::thread::spawn(move || {
            let out = child.wait_with_output().unwrap();
            notify.write_all(line.as_bytes()).unwrap();
            out
        });
        self.runs.insert(name.to_owned(), thread);
        pid
    }

    /// Waits until `count` runs said `ready`; a run that ends first fails the test.
    fn await_ready(&mut self, count: usize) {
        let mut ready = 0;
        while ready < count {
            let mut line = String::new();
            assert_ne!(self.ready.read_line(&mut line).unwrap(), 0);
            if let Some(name) = line.trim_end().strip_prefix("exited ") {
                let out = self.finish(name);
                panic!(
                    "run `{name}` ended before it was ready: {:?} {} {}",
                    out.status.code(),
                    text(&out.stdout),
                    text(&out.stderr)
                );
            }
            assert!(line.starts_with("ready "), "{line}");
            ready += 1;
        }
    }

    fn finish(&mut self, name: &str) -> Output {
        self.runs.remove(name).unwrap().join().unwrap()
    }

    /// Removes the FIFOs (the runs must be done).
    fn close(self) {
        assert!(self.runs.is_empty());
        for entry in std::fs::read_dir(&self.git).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name == "ready" || name == "alive" || name.starts_with("gate-") {
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
}

/// A FIFO opened for reading and writing (Linux): the open never blocks.
fn fifo(path: &Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first run to start leaves first, while the second still runs: the second must keep its
/// protection (the first's cleanup must not take its mounts away), both see git as outside,
/// the host's git sees nothing of them meanwhile, and the last one out leaves nothing.
fn two_runs_share_a_workspace(backend: Backend) {
    for runner in runners(backend) {
        let outside_ws = runner.repository("outside", true);
        let ws = runner.repository("shared", true);
        let porcelain = "git status --porcelain --ignored -uall 2>&1; echo end";
        let expected_status = text(&runner.outside(porcelain, &outside_ws).stdout);

        let mut meeting = Meeting::new(&runner, &ws);
        let first_gate = meeting.gate(&runner, "first");
        let second_gate = meeting.gate(&runner, "second");
        let first_script = format!(
            "exec 3<.git/gate-first; {porcelain}; echo 'ready first' > .git/ready; cat <&3 >/dev/null"
        );
        let second_script = format!(
            "exec 3<.git/gate-second; echo 'ready second' > .git/ready; cat <&3 >/dev/null; \
             {porcelain}; {ATTACKS}{porcelain}"
        );
        meeting.spawn("first", runner.inside_command(&first_script, &ws));
        meeting.await_ready(1);
        meeting.spawn("second", runner.inside_command(&second_script, &ws));
        meeting.await_ready(1);
        // The host, with both runs' placeholders in place, sees what it saw before (the FIFOs
        // in `.git` are git's own business).
        assert_eq!(
            text(&runner.outside(porcelain, &ws).stdout),
            expected_status,
            "{}: the host's git sees the runs' placeholders",
            runner.label()
        );
        drop(first_gate);
        let first = meeting.finish("first");
        assert_eq!(
            first.status.code(),
            Some(0),
            "{}: {}",
            runner.label(),
            text(&first.stderr)
        );
        // The first run is gone, cleanup included; the second goes on.
        drop(second_gate);
        let second = meeting.finish("second");
        let out = text(&second.stdout);
        assert_eq!(
            second.status.code(),
            Some(0),
            "{}: {}",
            runner.label(),
            text(&second.stderr)
        );
        assert!(
            !out.contains("ok:"),
            "{}: attacks worked after the first run left: {out}",
            runner.label()
        );
        assert_eq!(text(&first.stdout), expected_status, "{}", runner.label());
        assert_eq!(
            out,
            format!("{expected_status}end\n{expected_status}"),
            "{}: (stderr: {})",
            runner.label(),
            text(&second.stderr)
        );
        meeting.close();
        assert_no_leftover(&runner, &ws, &outside_ws);
        eprintln!(
            "{}: two runs in one workspace, nothing left",
            runner.label()
        );
    }
}

#[test]
fn bwrap_two_runs_in_one_workspace_keep_their_protection_and_leave_nothing() {
    two_runs_share_a_workspace(Backend::Bwrap);
}

#[test]
fn docker_two_runs_in_one_workspace_keep_their_protection_and_leave_nothing() {
    two_runs_share_a_workspace(Backend::Docker);
}

/// [`PARALLEL`] runs in one workspace, each making or joining the placeholders of the missing
/// protected paths and leaving: half wait at a gate until all of them are in their sandbox, and
/// the gate opens as the other half start, so runs leave (and remove what they hold) while
/// others are setting up. Every run must start (no "bwrap: Can't find source path", no 125),
/// see git as outside, fail every attack, and the last one out leave nothing.
fn parallel_runs(backend: Backend) {
    for runner in runners(backend) {
        // Without `.loopwright`: its placeholder stands for `.loopwright/policies`.
        let outside_ws = runner.repository("outside", false);
        let ws = runner.repository("parallel", false);
        let check = format!("git status --porcelain --ignored -uall 2>&1; {PARALLEL_ATTACKS}");
        let expected = text(
            &runner
                .outside(
                    "git status --porcelain --ignored -uall 2>&1; echo end",
                    &outside_ws,
                )
                .stdout,
        );

        // The attacks work outside.
        let scratch = runner.repository("scratch", false);
        let control = text(&runner.outside(PARALLEL_ATTACKS, &scratch).stdout);
        for attack in [
            "create-agents",
            "create-excl-claude",
            "mkdir-github",
            "symlink-agents",
            "create-policy",
        ] {
            assert!(
                control.contains(&format!("ok:{attack}\n")),
                "{}: {attack} does not work outside: {control}",
                runner.label()
            );
        }

        let mut meeting = Meeting::new(&runner, &ws);
        let gate = meeting.gate(&runner, "hold");
        let holders = PARALLEL / 2;
        for i in 0..holders {
            let script = format!(
                "exec 3<.git/gate-hold; echo 'ready {i}' > .git/ready; cat <&3 >/dev/null; {check}"
            );
            meeting.spawn(&format!("holder-{i}"), runner.inside_command(&script, &ws));
        }
        meeting.await_ready(holders);
        for i in holders..PARALLEL {
            meeting.spawn(&format!("starter-{i}"), runner.inside_command(&check, &ws));
        }
        drop(gate);
        let names: Vec<String> = meeting.runs.keys().cloned().collect();
        for name in names {
            let out = meeting.finish(&name);
            assert_eq!(
                (out.status.code(), text(&out.stdout)),
                (Some(0), expected.clone()),
                "{}: run `{name}`: {}",
                runner.label(),
                text(&out.stderr)
            );
        }
        meeting.close();
        assert_no_leftover(&runner, &ws, &outside_ws);
        eprintln!(
            "{}: {PARALLEL} runs in one workspace, nothing left",
            runner.label()
        );
    }
}

#[test]
fn bwrap_parallel_runs_in_one_workspace_all_start_and_leave_nothing() {
    parallel_runs(Backend::Bwrap);
}

#[test]
fn docker_parallel_runs_in_one_workspace_all_start_and_leave_nothing() {
    parallel_runs(Backend::Docker);
}

/// Palisade SIGKILLed in the middle of a run: nothing releases its placeholders, so they stay
/// (a Docker container outlives palisade until the reaper has removed it, and must not lose
/// its mounts before); the sandbox's processes go; and the next run in the workspace removes
/// them, leaving nothing.
fn killed_run(backend: Backend) {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    for runner in runners(backend) {
        let outside_ws = runner.repository("outside", true);
        let ws = runner.repository("killed", true);
        let mut meeting = Meeting::new(&runner, &ws);
        let gate = meeting.gate(&runner, "killed");
        let out = runner.outside("mkfifo .git/alive", &ws);
        assert!(out.status.success(), "mkfifo: {}", text(&out.stderr));
        // Reads `.git/alive` to its end: until no process of the sandbox holds it open.
        let alive = ws.join(".git/alive");
        let sandbox_gone = std::thread::spawn(move || {
            let mut rest = Vec::new();
            File::open(alive).unwrap().read_to_end(&mut rest).unwrap();
        });
        let script = "exec 3<.git/gate-killed 4>.git/alive; echo 'ready killed' > .git/ready; cat <&3 >/dev/null";
        let pid = meeting.spawn("killed", runner.inside_command(script, &ws));
        meeting.await_ready(1);
        let kill = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        sandbox_gone.join().unwrap();
        let killed = meeting.finish("killed");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&killed.status),
            Some(9),
            "{}: {}",
            runner.label(),
            text(&killed.stderr)
        );
        drop(gate);
        for rel in PROTECTED {
            let meta = std::fs::symlink_metadata(ws.join(rel)).unwrap_or_else(|e| {
                panic!("{}: no placeholder left at `{rel}`: {e}", runner.label())
            });
            assert!(
                meta.file_type().is_socket() && meta.mode() & 0o7777 == 0,
                "{}: `{rel}` is no placeholder",
                runner.label()
            );
        }
        // Whatever still shares the killed run's locks (Docker's reaper, until the container
        // is gone) has let go once an exclusive lock can be had.
        for dir in [ws.clone(), ws.join(".loopwright")] {
            let dir = File::open(dir).unwrap();
            dir.lock().unwrap();
        }
        let porcelain = "git status --porcelain --ignored -uall 2>&1; echo end";
        let next = runner.inside(porcelain, &ws);
        assert_eq!(
            text(&next.stdout),
            text(&runner.outside(porcelain, &outside_ws).stdout),
            "{}: {}",
            runner.label(),
            text(&next.stderr)
        );
        meeting.close();
        assert_no_leftover(&runner, &ws, &outside_ws);
        eprintln!(
            "{}: a killed run's placeholders went with the next run",
            runner.label()
        );
    }
}

#[test]
fn bwrap_a_killed_runs_placeholders_go_with_the_next_run() {
    killed_run(Backend::Bwrap);
}

#[test]
fn docker_a_killed_runs_placeholders_go_with_the_next_run() {
    killed_run(Backend::Docker);
}

// ---------------------------------------------------------------------------------------------
// git's execution surface: nothing planted in the repository runs later, outside (issue 34)

/// Each attack plants something the host's git runs later; `@M@` is the marks directory the
/// planted command touches a file in (named after the attack).
const GIT_PLANTS: [(&str, &str); 9] = [
    (
        "hook",
        "hook hook > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout",
    ),
    (
        "fsmonitor",
        r#"git config core.fsmonitor "touch @M@/fsmonitor; false""#,
    ),
    (
        "hooks-path",
        r#"mkdir -p hk && hook hooks-path > hk/post-checkout && chmod +x hk/post-checkout && git config core.hooksPath "$PWD/hk""#,
    ),
    (
        "ssh-command",
        r#"git config remote.o.url ssh://127.0.0.1/nothing && git config core.sshCommand "touch @M@/ssh-command; false""#,
    ),
    ("alias", r#"git config alias.al "!touch @M@/alias""#),
    (
        "include-path",
        r#"printf "[alias]\n\tinc = !touch @M@/include-path\n" > inc.cfg && git config include.path "$PWD/inc.cfg""#,
    ),
    (
        "rename-config",
        r#"cp .git/config c.tmp && printf "[alias]\n\trn = !touch @M@/rename-config\n" >> c.tmp && mv -f c.tmp .git/config"#,
    ),
    (
        "symlink-config",
        r#"cp .git/config s.cfg && printf "[alias]\n\tsl = !touch @M@/symlink-config\n" >> s.cfg && ln -sf "$PWD/s.cfg" .git/config"#,
    ),
    (
        "worktree-config",
        r#"git config extensions.worktreeConfig true && printf "[core]\n\tfsmonitor = touch @M@/worktree-config\n" > .git/config.worktree"#,
    ),
];

/// The plants as one script: each prints `ok:<name>` when the whole plant worked.
fn plant_script(plants: &[(&str, &str)]) -> String {
    let mut script = String::from(
        "try() { if (eval \"$2\") >/dev/null 2>&1; then echo \"ok:$1\"; fi; }\n\
         hook() { printf '#!/bin/sh\\ntouch @M@/%s\\n' \"$1\"; }\n",
    );
    for (name, plant) in plants {
        script.push_str(&format!("try {name} '{}'\n", plant.replace('\'', r"'\''")));
    }
    script.push_str("echo end\n");
    script
}

/// The host-side git commands that would run what [`GIT_PLANTS`] planted.
const GIT_TRIGGERS: &str = "git status >/dev/null 2>&1; git checkout -q -b planted 2>/dev/null; \
    git fetch -q o 2>/dev/null; git al 2>/dev/null; git inc 2>/dev/null; git rn 2>/dev/null; \
    git sl 2>/dev/null; true";

/// In a workspace that is no repository: a `git init` there, then a hook and `core.fsmonitor`.
const INIT_PLANT: &str = r#"
if (git init -q && git config core.fsmonitor "touch @M@/init-fsmonitor; false" \
    && printf '#!/bin/sh\ntouch @M@/init-hook\n' > .git/hooks/post-checkout \
    && chmod +x .git/hooks/post-checkout) >/dev/null 2>&1; then echo ok:init; fi
echo end
"#;

const INIT_TRIGGERS: &str =
    "git status >/dev/null 2>&1; git checkout -q -b planted 2>/dev/null; true";

/// A repository made two levels down during the run: no mount can protect it, so palisade
/// reports what it holds after the run.
const DEEP_PLANT: &str = r#"
mkdir -p crates/hello && cd crates/hello && git init -q \
  && git config core.fsmonitor "touch @M@/deep-fsmonitor; false" \
  && mkdir -p .git/hooks && printf '#!/bin/sh\ntouch @M@/deep-hook\n' > .git/hooks/post-checkout \
  && chmod +x .git/hooks/post-checkout && echo ok:deep
"#;

impl Runner {
    /// A fresh directory `<base>/<name>` of this user's, for the planted commands' marks.
    fn marks(&self, name: &str) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir(&dir).unwrap();
        escape_kit::chown_tree(&dir, self.user);
        dir
    }

    /// A directory `<base>/repos/<name>` of this user's that is no repository.
    fn plain_dir(&self, name: &str) -> PathBuf {
        let ws = self.path("repos").join(name);
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("notes.txt"), "notes\n").unwrap();
        escape_kit::chown_tree(&ws, self.user);
        ws
    }
}

fn with_marks(script: &str, marks: &Path) -> String {
    script.replace("@M@", &marks.display().to_string())
}

/// What the planted commands touched, sorted.
fn fired(marks: &Path) -> BTreeSet<String> {
    entries(marks)
}

fn git_surface(backend: Backend) {
    for runner in runners(backend) {
        let label = runner.label();

        // Every plant works outside, each in a repository of its own (`core.hooksPath` would
        // hide a hook in `.git/hooks`), and the host's git then runs each.
        for (name, plant) in GIT_PLANTS {
            let control_ws = runner.repository(&format!("surface-outside-{name}"), true);
            let control_marks = runner.marks(&format!("marks-outside-{name}"));
            let script = with_marks(&plant_script(&[(name, plant)]), &control_marks);
            let planted = runner.outside(&script, &control_ws);
            assert_eq!(
                text(&planted.stdout),
                format!("ok:{name}\nend\n"),
                "{label}: {name} cannot be planted outside: {}",
                text(&planted.stderr)
            );
            runner.outside(GIT_TRIGGERS, &control_ws);
            assert_eq!(
                fired(&control_marks),
                BTreeSet::from([name.to_owned()]),
                "{label}: the command {name} planted does not fire outside"
            );
        }

        // Inside, none can be planted, and the same git commands afterwards run nothing.
        let ws = runner.repository("surface-inside", true);
        let marks = runner.marks("marks-inside");
        let out = runner.inside(&with_marks(&plant_script(&GIT_PLANTS), &marks), &ws);
        let stdout = text(&out.stdout);
        assert!(stdout.ends_with("end\n"), "{label}: {}", text(&out.stderr));
        assert!(!stdout.contains("ok:"), "{label}: planted inside: {stdout}");
        runner.outside(GIT_TRIGGERS, &ws);
        assert_eq!(
            fired(&marks),
            BTreeSet::new(),
            "{label}: a command planted inside ran outside"
        );

        // A workspace in no repository: `git init` works outside, and its hook and
        // fsmonitor fire; inside, `.git` cannot be made.
        let plain_outside = runner.plain_dir("plain-outside");
        let plain_marks = runner.marks("marks-init-outside");
        let out = runner.outside(&with_marks(INIT_PLANT, &plain_marks), &plain_outside);
        assert!(
            text(&out.stdout).contains("ok:init\n"),
            "{label}: {}",
            text(&out.stderr)
        );
        runner.outside(INIT_TRIGGERS, &plain_outside);
        assert!(
            fired(&plain_marks).contains("init-fsmonitor"),
            "{label}: {:?}",
            fired(&plain_marks)
        );
        let plain = runner.plain_dir("plain-inside");
        let marks = runner.marks("marks-init-inside");
        let out = runner.inside(&with_marks(INIT_PLANT, &marks), &plain);
        assert_eq!(
            text(&out.stdout),
            "end\n",
            "{label}: git init at the workspace's root: {}",
            text(&out.stderr)
        );
        assert!(
            std::fs::symlink_metadata(plain.join(".git")).is_err(),
            "{label}: `.git` left in a workspace that had none"
        );
        runner.outside(INIT_TRIGGERS, &plain);
        assert_eq!(fired(&marks), BTreeSet::new(), "{label}");

        // A repository made two levels down cannot be protected: it is reported.
        let marks = runner.marks("marks-deep");
        let out = runner.inside(&with_marks(DEEP_PLANT, &marks), &ws);
        let stderr = text(&out.stderr);
        assert!(text(&out.stdout).contains("ok:deep"), "{label}: {stderr}");
        let report = stderr
            .lines()
            .find(|line| line.contains("crates/hello/.git"))
            .unwrap_or_else(|| panic!("{label}: no report of the new repository: {stderr}"));
        assert!(
            report.contains("hook post-checkout") && report.contains("core.fsmonitor"),
            "{label}: {report}"
        );
        eprintln!("{label}: git's hooks and config held; a new repository reported");
    }
}

#[test]
fn bwrap_nothing_planted_in_git_runs_later_outside() {
    git_surface(Backend::Bwrap);
}

#[test]
fn docker_nothing_planted_in_git_runs_later_outside() {
    git_surface(Backend::Docker);
}

// ---------------------------------------------------------------------------------------------
// Palisade's own state, out of the sandbox's reach (issue 36)

/// With the per-user host configuration's directory inside a writable root (`--writable-root
/// ~/.config`), the command cannot create it or a `host.yaml` in it, under bwrap and docker, as
/// root and as uid 65534; the same write works outside, and nothing is left where it would be.
fn state_out_of_reach(backend: Backend) {
    for runner in runners(backend) {
        let label = runner.label();
        let config = runner.path("home/.config");
        std::fs::create_dir_all(&config).unwrap();
        escape_kit::chown_tree(&config, runner.user);
        let ws = runner.repository("state", false);
        let script = "mkdir -p ~/.config/palisade && echo 'spec: {allowDirectDedicated: true}' > ~/.config/palisade/host.yaml && echo WROTE";
        let outside = runner.outside(script, &ws);
        assert!(
            text(&outside.stdout).contains("WROTE"),
            "{label}: {}",
            text(&outside.stderr)
        );
        std::fs::remove_dir_all(config.join("palisade")).unwrap();

        let root = config.display().to_string();
        // Inside, the command reaches the very directory (its placeholder is there), and the
        // write fails.
        let probe = format!("ls -l ~/.config | grep -q '^s.* palisade$' && echo HELD; {script}");
        let out = runner
            .inside_command_with(&["--writable-root", &root], &probe, &ws)
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_ne!(out.status.code(), Some(125), "{label}: {stderr}");
        assert!(text(&out.stdout).contains("HELD"), "{label}: {stderr}");
        assert!(!text(&out.stdout).contains("WROTE"), "{label}: {stderr}");
        assert!(
            stderr.contains("Palisade's own state is read-only in this run"),
            "{label}: {stderr}"
        );
        assert!(
            !config.join("palisade").exists(),
            "{label}: ~/.config/palisade exists after the run"
        );
        eprintln!("{label}: Palisade's configuration directory held");
    }
}

#[test]
fn bwrap_palisades_own_state_is_out_of_reach() {
    state_out_of_reach(Backend::Bwrap);
}

#[test]
fn docker_palisades_own_state_is_out_of_reach() {
    state_out_of_reach(Backend::Docker);
}

/// Palisade's signing key (`palisade key init`, made by the runner's user) cannot be read or
/// replaced from inside, under bwrap and docker, as root and as uid 65534: not plainly, not
/// through `--writable-root ~/.config` (which holds it), and its directory as a writable root is
/// refused before anything runs. Outside, the same user reads it.
fn signing_key_out_of_reach(backend: Backend) {
    for runner in runners(backend) {
        let label = runner.label();
        let ws = runner.repository("keys", false);
        let palisade = runner.palisade.display().to_string();
        let made = runner
            .command(&[palisade.as_str(), "key", "init"], &ws)
            .output()
            .unwrap();
        assert!(made.status.success(), "{label}: {}", text(&made.stderr));
        let keys = runner.path("home/.config/palisade/keys");
        let key = std::fs::read(keys.join("audit-signing.key")).unwrap();
        let read = "cat ~/.config/palisade/keys/audit-signing.key; echo x > ~/.config/palisade/keys/audit-signing.key && echo WROTE";
        let outside = runner.outside("cat ~/.config/palisade/keys/audit-signing.key", &ws);
        assert!(
            text(&outside.stdout).contains("\"seed\""),
            "{label}: {}",
            text(&outside.stderr)
        );
        let config = runner.path("home/.config").display().to_string();
        let key_dir = keys.display().to_string();
        for (route, extra) in [
            ("plain", vec![]),
            (
                "--writable-root ~/.config",
                vec!["--writable-root", config.as_str()],
            ),
            (
                "--writable-root <keys>",
                vec!["--writable-root", key_dir.as_str()],
            ),
        ] {
            let out = runner
                .inside_command_with(&extra, read, &ws)
                .output()
                .unwrap();
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert!(!stdout.contains("seed"), "{label}: {route}: read the key");
            assert!(!stdout.contains("WROTE"), "{label}: {route}: {stderr}");
            if route == "--writable-root <keys>" {
                assert_eq!(out.status.code(), Some(125), "{label}: {route}: {stderr}");
                assert!(
                    stderr.contains("SANDBOX_WRITABLE_ROOT_UNSAFE"),
                    "{label}: {route}: {stderr}"
                );
            } else {
                assert_ne!(out.status.code(), Some(125), "{label}: {route}: {stderr}");
            }
            assert_eq!(
                std::fs::read(keys.join("audit-signing.key")).unwrap(),
                key,
                "{label}: {route}: the key changed"
            );
        }
        eprintln!("{label}: Palisade's signing key held");
    }
}

#[test]
fn bwrap_palisades_signing_key_is_out_of_reach() {
    signing_key_out_of_reach(Backend::Bwrap);
}

#[test]
fn docker_palisades_signing_key_is_out_of_reach() {
    signing_key_out_of_reach(Backend::Docker);
}
