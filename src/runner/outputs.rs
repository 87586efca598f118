//! Output artifacts: files a runner's tool produced, stored on the
//! artifact storage under the attempt and listed in the finished report.
//! The bytes are masked like everything else a runner sends: a text file
//! holding a resolved secret is stored masked; a binary one is refused
//! (masking would corrupt it, storing it would leak the value).

use std::path::Path;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::contract::outputs::{output_name_problem, MAX_OUTPUTS, MAX_OUTPUT_BYTES};
use crate::contract::{FailureCategory, OutputArtifact, RetentionClass};
use crate::secrets::Masker;

/// Why an output was not stored.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The runner's own doing: a bad name, too many, too big, not a file,
    /// a secret in a binary file.
    #[error("output `{name}`: {reason}")]
    Refused { name: String, reason: String },
    /// The storage could not be reached or refused the write.
    #[error("output `{name}`: storing it failed: {reason}")]
    Storage { name: String, reason: String },
}

impl OutputError {
    pub fn category(&self) -> FailureCategory {
        match self {
            OutputError::Refused { .. } => FailureCategory::RunnerError,
            OutputError::Storage { .. } => FailureCategory::Infrastructure,
        }
    }
}

/// Output `name` refused for `reason`.
fn refused(name: &str, reason: String) -> OutputError {
    OutputError::Refused {
        name: crate::contract::limits::loggable(name),
        reason,
    }
}

/// The outputs of one attempt, shared by its context and its final report.
#[derive(Clone, Debug)]
pub(crate) struct Outputs {
    attempt_id: Uuid,
    /// The attempt's tenant, whose the outputs are.
    tenant: String,
    masker: Masker,
    stored: Arc<Mutex<Vec<OutputArtifact>>>,
}

impl Outputs {
    pub(crate) fn new(attempt_id: Uuid, tenant: &str, masker: Masker) -> Self {
        Self {
            attempt_id,
            tenant: tenant.to_owned(),
            masker,
            stored: Arc::default(),
        }
    }

    /// What was stored, for the final report.
    pub(crate) fn taken(&self) -> Vec<OutputArtifact> {
        match self.stored.lock() {
            Ok(stored) => stored.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Stores the regular file at `path` as output `name`. Storing a name
    /// again replaces the earlier entry (a probe's later sample wins).
    pub(crate) async fn store(
        &self,
        storage: Option<&crate::artifacts::Storage>,
        path: &Path,
        name: &str,
        class: RetentionClass,
        media_type: &str,
    ) -> Result<OutputArtifact, OutputError> {
        // Before anything is read.
        self.admissible(name)?;
        let refused = |reason: String| refused(name, reason);
        // Never follow a link the tool left: it could point anywhere.
        let metadata = tokio::fs::symlink_metadata(path)
            .await
            .map_err(|error| refused(format!("cannot read it: {error}")))?;
        if !metadata.is_file() {
            return Err(refused("not a regular file".into()));
        }
        if metadata.len() > MAX_OUTPUT_BYTES {
            return Err(refused(format!(
                "{} bytes; at most {MAX_OUTPUT_BYTES}",
                metadata.len()
            )));
        }
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|error| refused(format!("cannot read it: {error}")))?;
        self.store_bytes(storage, bytes, name, class, media_type)
            .await
    }

    /// Whether output `name` may be stored: a name of an output, and room
    /// for it among the attempt's.
    fn admissible(&self, name: &str) -> Result<(), OutputError> {
        if let Some(problem) = output_name_problem(name) {
            return Err(refused(name, problem));
        }
        let known = self.taken();
        if known.len() >= MAX_OUTPUTS && !known.iter().any(|output| output.name == name) {
            return Err(refused(
                name,
                format!("an attempt stores at most {MAX_OUTPUTS} outputs"),
            ));
        }
        Ok(())
    }

    /// Stores `bytes` as output `name`, as [`Self::store`] stores a file's.
    pub(crate) async fn store_bytes(
        &self,
        storage: Option<&crate::artifacts::Storage>,
        bytes: Vec<u8>,
        name: &str,
        class: RetentionClass,
        media_type: &str,
    ) -> Result<OutputArtifact, OutputError> {
        self.admissible(name)?;
        if bytes.len() as u64 > MAX_OUTPUT_BYTES {
            return Err(refused(
                name,
                format!("{} bytes; at most {MAX_OUTPUT_BYTES}", bytes.len()),
            ));
        }
        let Some(storage) = storage else {
            return Err(OutputError::Storage {
                name: name.to_owned(),
                reason: "this runner has no artifact storage".into(),
            });
        };
        let bytes = self.masked(bytes).map_err(|reason| refused(name, reason))?;
        let output = crate::artifacts::outputs::put(
            storage,
            self.attempt_id,
            &self.tenant,
            crate::artifacts::outputs::Output {
                name,
                class,
                media_type,
            },
            &bytes,
        )
        .await
        .map_err(|error| OutputError::Storage {
            name: name.to_owned(),
            reason: error.to_string(),
        })?;
        let mut stored = match self.stored.lock() {
            Ok(stored) => stored,
            Err(poisoned) => poisoned.into_inner(),
        };
        stored.retain(|earlier| earlier.name != output.name);
        stored.push(output.clone());
        Ok(output)
    }

    /// The bytes to store: masked when they are text holding a secret;
    /// refused when they are binary holding one.
    fn masked(&self, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
        if !self.masker.found_in(&bytes) {
            return Ok(bytes);
        }
        match String::from_utf8(bytes) {
            Ok(text) => Ok(self.masker.mask(&text).into_bytes()),
            Err(_) => Err("a binary file holding a secret value is not stored".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::ArtifactStorage;
    use crate::contract::outputs::output_key;
    use sha2::{Digest, Sha256};

    #[tokio::test]
    async fn outputs_are_masked_refused_or_stored_by_content() {
        let dir = std::env::temp_dir().join(format!("execplane-outputs-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let storage = crate::artifacts::Storage::open(&crate::artifacts::StorageSettings::Local(
            dir.join("store"),
        ));
        let attempt = Uuid::from_u128(5);
        let outputs = Outputs::new(attempt, "team-a", Masker::new(["hunter2-secret"]));
        let text = dir.join("report.txt");
        std::fs::write(&text, "token=hunter2-secret\n").unwrap();
        let stored = outputs
            .store(
                Some(&storage),
                &text,
                "report.txt",
                RetentionClass::Evidence,
                "text/plain",
            )
            .await
            .unwrap();
        let bytes = storage.get(&stored.key).await.unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("hunter2-secret"));
        assert_eq!(stored.sha256, hex::encode(Sha256::digest(&bytes)));
        assert_eq!(
            stored.key,
            output_key(attempt, &stored.sha256, "report.txt")
        );

        let binary = dir.join("plan.bin");
        let mut content = vec![0xff, 0xfe, 0x00];
        content.extend_from_slice(b"hunter2-secret");
        std::fs::write(&binary, content).unwrap();
        let error = outputs
            .store(
                Some(&storage),
                &binary,
                "plan.bin",
                RetentionClass::Evidence,
                "x",
            )
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("binary file holding a secret"),
            "{error}"
        );

        let link = dir.join("link");
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        assert!(
            outputs
                .store(
                    Some(&storage),
                    &link,
                    "passwd",
                    RetentionClass::Evidence,
                    "x"
                )
                .await
                .is_err(),
            "a link is never followed"
        );
        assert!(outputs
            .store(
                Some(&storage),
                &text,
                "../escape",
                RetentionClass::Evidence,
                "x"
            )
            .await
            .is_err());
        assert_eq!(outputs.taken().len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
