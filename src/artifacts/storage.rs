//! Where bundles are stored. The embedded default is a local directory;
//! S3-compatible storage arrives with its own backend.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage: {0}")]
    Io(#[from] std::io::Error),
}

/// Put, get and delete by key (`<attempt id>/<name>`).
pub trait ArtifactStorage: Send + Sync + 'static {
    fn put(
        &self,
        key: &str,
        bytes: &[u8],
    ) -> impl std::future::Future<Output = Result<(), StorageError>> + Send;
    fn get(
        &self,
        key: &str,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, StorageError>> + Send;
    /// Deletes a key; a key already gone is not an error.
    fn delete(
        &self,
        key: &str,
    ) -> impl std::future::Future<Output = Result<(), StorageError>> + Send;
    /// Where a key lives, for `artifact.created`'s `uri`.
    fn uri(&self, key: &str) -> String;
}

/// Bundles as files under a root directory, written atomically (temp file,
/// fsync, rename) so a reader never sees half a bundle.
#[derive(Clone, Debug)]
pub struct LocalDir {
    root: PathBuf,
}

impl LocalDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, key: &str) -> PathBuf {
        // Keys are built from a UUID and a fixed artifact name.
        self.root.join(key.replace("..", "_"))
    }
}

impl ArtifactStorage for LocalDir {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        let path = self.path(key);
        let bytes = bytes.to_vec();
        tokio::task::spawn_blocking(move || {
            use std::io::Write;
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let temp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            std::fs::rename(&temp, &path)?;
            Ok(())
        })
        .await
        .map_err(|error| StorageError::Io(std::io::Error::other(error)))?
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        Ok(tokio::fs::read(self.path(key)).await?)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        match tokio::fs::remove_file(self.path(key)).await {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error.into()),
            _ => Ok(()),
        }
    }

    fn uri(&self, key: &str) -> String {
        format!("file://{}", self.path(key).display())
    }
}
