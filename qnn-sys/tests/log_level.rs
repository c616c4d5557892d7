//! The backend log level: names, the program's default, the environment variable that wins
//! over it, and which messages are demoted as benign. No backend needed. One test function:
//! it sets a process-wide default and an environment variable, which parallel tests would race.

use qnn_sys::{default_log_level, is_benign, set_default_log_level, LogLevel, QNN_LOG_VAR};

#[test]
fn names_default_environment_and_benign_messages() {
    for (name, want) in [
        ("off", Some(None)),
        ("error", Some(Some(LogLevel::Error))),
        ("WARN", Some(Some(LogLevel::Warn))),
        (" info ", Some(Some(LogLevel::Info))),
        ("verbose", Some(Some(LogLevel::Verbose))),
        ("loud", None),
        ("", None),
    ] {
        assert_eq!(LogLevel::from_name(name), want, "{name:?}");
    }

    std::env::remove_var(QNN_LOG_VAR);
    // Nothing chosen: errors only.
    assert_eq!(default_log_level(), Some(LogLevel::Error));
    for l in [None, Some(LogLevel::Warn), Some(LogLevel::Verbose)] {
        set_default_log_level(l);
        assert_eq!(default_log_level(), l);
        assert_eq!(qnn_sys::SessionOptions::default().log_level, l);
    }
    // The environment wins over the program's choice; a name it does not know is ignored.
    set_default_log_level(Some(LogLevel::Warn));
    std::env::set_var(QNN_LOG_VAR, "off");
    assert_eq!(default_log_level(), None);
    std::env::set_var(QNN_LOG_VAR, "verbose");
    assert_eq!(default_log_level(), Some(LogLevel::Verbose));
    std::env::set_var(QNN_LOG_VAR, "shouting");
    assert_eq!(default_log_level(), Some(LogLevel::Warn));
    std::env::remove_var(QNN_LOG_VAR);

    // The simulator's per-graph message is benign; a real error is not.
    assert!(is_benign(" <E> unexpected GraphHtpSettings option 66"));
    assert!(!is_benign(" <E> unexpected GraphHtpSettings option 3"));
    assert!(!is_benign(" <E> unexpected GraphHtpSettings option 660"));
    assert!(!is_benign(
        " <E> Could't match allocated VTCM pointer to a VXU VTCM"
    ));
}
