//! How every table, page and gate names a process: the program it ran is the file name of
//! its first argument, its kernel name (comm) when it has no command line. One home, so the
//! summary, the HTML page, `diff`, `--repeat` and the budgets group processes alike.

/// The file name of a path (`/usr/bin/python3` -> `python3`; a bare name stays as it is):
/// the same rule that names source files in frames.
pub use crate::functions::symbolize::base_name as file_name;

/// The program a process ran: the file name of `argv[0]`, `comm` when there is none (or
/// it is empty).
pub fn program_of<'a>(argv0: Option<&'a str>, comm: &'a str) -> &'a str {
    match argv0.map(file_name) {
        Some(name) if !name.is_empty() => name,
        _ => comm,
    }
}

/// The program's name in a command line (words separated by spaces): its first word's file
/// name.
pub fn program_in_command(command: &str) -> &str {
    file_name(command.split(' ').next().unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_argv0s_file_name_else_comm() {
        assert_eq!(
            program_of(Some("/usr/bin/python3"), "python3.12"),
            "python3"
        );
        assert_eq!(program_of(Some("make"), "make"), "make");
        // No command line (a kernel thread, a process gone before it was read): its comm.
        assert_eq!(program_of(None, "kworker/0:1"), "kworker/0:1");
        assert_eq!(program_of(Some(""), "sh"), "sh");
        // A path ending in a slash names no file: the comm.
        assert_eq!(program_of(Some("/opt/"), "app"), "app");
    }

    #[test]
    fn the_program_in_a_command_line_is_its_first_words_file_name() {
        assert_eq!(program_in_command("/usr/bin/python3 -c x"), "python3");
        assert_eq!(program_in_command("make -j2"), "make");
        assert_eq!(program_in_command(""), "");
    }
}
