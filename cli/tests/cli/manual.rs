//! Help, completions and man pages.

use idutil_harness::{run, run_to};

use crate::{idutil, text};

#[test]
fn help_for_every_command_has_examples() {
    let dir = tempfile::tempdir().unwrap();
    let mut commands = vec![
        &[][..],
        &["next"],
        &["decode"],
        &["state"],
        &["state", "recover"],
        &["completions"],
        &["man"],
    ];
    if cfg!(lease) {
        commands.extend([&["lease"][..], &["lease", "check"], &["lease", "release"]]);
    }
    for command in commands {
        for help in [vec!["--help"], vec!["-h"]] {
            let out = run(idutil(dir.path()).args(command).args(&help));
            let stdout = text(&out.stdout);
            assert!(out.status.success(), "{command:?} {help:?}");
            assert!(out.stderr.is_empty(), "{command:?}: {}", text(&out.stderr));
            assert!(stdout.contains("Usage: idutil"), "{command:?}: {stdout}");
            assert!(stdout.contains("Examples:"), "{command:?}: {stdout}");
            let example = format!("  idutil {}", command.join(" "));
            assert!(stdout.contains(example.trim_end()), "{command:?}: {stdout}");
        }
    }
    let out = run(idutil(dir.path()).args(["help", "decode"]));
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("idutil decode 1452736581206048"));
    let out = run(idutil(dir.path()).arg("--version"));
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("idutil "));
}

#[test]
fn completions_for_every_shell() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(idutil(dir.path()).args(["completions", shell]));
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for word in ["idutil", "decode", "recover", "state-dir"] {
            assert!(script.contains(word), "{shell}: no {word:?} in\n{script}");
        }
    }
    let out = run(idutil(dir.path()).args(["completions", "bash"]));
    assert!(text(&out.stdout).contains("complete -F _idutil"));
}

#[test]
fn the_man_pages_render() {
    let dir = tempfile::tempdir().unwrap();
    for (args, title) in [
        (&["man"][..], ".TH idutil 1"),
        (&["man", "decode"], ".TH idutil-decode 1"),
        (&["man", "state", "recover"], ".TH idutil-state-recover 1"),
    ] {
        let out = run(idutil(dir.path()).args(args));
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let page = text(&out.stdout);
        assert!(page.contains(title), "{args:?}:\n{page}");
        assert!(page.contains("\n.SH SYNOPSIS\n"), "{args:?}:\n{page}");
        assert!(page.contains("idutil 0."), "the version: {args:?}:\n{page}");
    }
    let page = text(&run(idutil(dir.path()).arg("man")).stdout);
    for section in ["decode", "completions", "Exit status"] {
        assert!(page.contains(section), "{section}:\n{page}");
    }
}

#[test]
fn completions_and_man_report_a_failed_write() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        idutil_harness::skipped(format_args!(
            "SKIPPED completions_and_man_report_a_failed_write: no /dev/full, so a failed \
             write of completions and the manual is NOT tested"
        ));
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for args in [&["completions", "bash"][..], &["man"]] {
        let out = run_to(
            idutil(dir.path()).args(args),
            full.try_clone().unwrap().into(),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot write the output"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
