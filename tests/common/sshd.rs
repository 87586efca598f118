//! The test sshd scripts/sshd.sh starts on 127.0.0.1:2222: its host key,
//! as a node binding names it, and the test user's private key.

fn ssh_dir() -> std::path::PathBuf {
    super::stack_dir().join("ssh")
}

/// The host key as a known_hosts key (`ssh-ed25519 AAAA...`).
pub fn host_key() -> String {
    let line = std::fs::read_to_string(ssh_dir().join("host_ed25519.pub"))
        .expect("scripts/sshd.sh made the host key");
    line.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The host key's fingerprint as `ssh-keygen -l` prints it (`SHA256:...`).
pub fn host_key_fingerprint() -> String {
    let keygen = std::process::Command::new("ssh-keygen")
        .arg("-lf")
        .arg(ssh_dir().join("host_ed25519.pub"))
        .output()
        .unwrap();
    let printed = String::from_utf8(keygen.stdout).unwrap();
    let pin = printed.split_whitespace().nth(1).unwrap().to_owned();
    assert!(pin.starts_with("SHA256:"), "{printed}");
    pin
}

/// The test user's private key (the tests store it in OpenBao).
pub fn user_key() -> String {
    std::fs::read_to_string(ssh_dir().join("user_ed25519")).unwrap()
}
