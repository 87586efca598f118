//! Where bundles are stored. The embedded default is a local directory;
//! S3-compatible storage arrives with its own backend.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage: {0}")]
    Io(#[from] std::io::Error),
    /// No object under the key (a caller's mistake, not an outage).
    #[error("storage: no object `{0}`")]
    NotFound(String),
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
    /// The size of the object at `key`, `None` when there is none: whether
    /// it is there, without reading it.
    fn size(
        &self,
        key: &str,
    ) -> impl std::future::Future<Output = Result<Option<u64>, StorageError>> + Send;
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
        match tokio::fs::read(self.path(key)).await {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Err(StorageError::NotFound(key.to_owned()))
            }
            read => Ok(read?),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        match tokio::fs::remove_file(self.path(key)).await {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error.into()),
            _ => Ok(()),
        }
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match tokio::fs::symlink_metadata(self.path(key)).await {
            Ok(metadata) if metadata.is_file() => Ok(Some(metadata.len())),
            Ok(_) => Ok(None),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    fn uri(&self, key: &str) -> String {
        format!("file://{}", self.path(key).display())
    }
}

/// S3-compatible storage (Garage, MinIO, AWS): path-style addressing, an
/// endpoint override, multipart above [`S3::PART_SIZE`]. Each object
/// carries its sha256 as metadata, and a read compares the content with it.
#[derive(Clone, Debug)]
pub struct S3 {
    client: aws_sdk_s3::Client,
    bucket: String,
}

/// How to reach the bucket.
#[derive(Clone, Debug)]
pub struct S3Settings {
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    pub access_key_id: String,
    pub secret_access_key: crate::secrets::Secret,
}

fn s3_error(error: impl std::fmt::Display) -> StorageError {
    StorageError::Io(std::io::Error::other(error.to_string()))
}

impl S3 {
    /// Parts of a multipart upload (S3's minimum is 5 MiB).
    pub const PART_SIZE: usize = 8 * 1024 * 1024;

    pub fn new(settings: &S3Settings) -> Self {
        use aws_sdk_s3::config::{
            BehaviorVersion, Credentials, Region, RequestChecksumCalculation,
            ResponseChecksumValidation,
        };
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&settings.endpoint)
            .region(Region::new(settings.region.clone()))
            .force_path_style(true)
            .credentials_provider(Credentials::new(
                &settings.access_key_id,
                settings.secret_access_key.expose(),
                None,
                None,
                "execplane",
            ))
            // The content's own sha256 is checked on read instead of the
            // SDK's default CRC trailers, which not every S3 speaks.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .timeout_config(
                aws_sdk_s3::config::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(std::time::Duration::from_secs(30))
                    .connect_timeout(std::time::Duration::from_secs(3))
                    .build(),
            )
            .build();
        Self {
            client: aws_sdk_s3::Client::from_conf(config),
            bucket: settings.bucket.clone(),
        }
    }
}

impl ArtifactStorage for S3 {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        use aws_sdk_s3::primitives::ByteStream;
        let sha256 = super::sha256_hex(bytes);
        if bytes.len() <= Self::PART_SIZE {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(key)
                .metadata("sha256", &sha256)
                .body(ByteStream::from(bytes.to_vec()))
                .send()
                .await
                .map_err(|error| s3_error(aws_sdk_s3::error::DisplayErrorContext(error)))?;
            return Ok(());
        }
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .metadata("sha256", &sha256)
            .send()
            .await
            .map_err(|error| s3_error(aws_sdk_s3::error::DisplayErrorContext(error)))?;
        let upload_id = upload.upload_id().unwrap_or_default().to_owned();
        let mut parts = Vec::new();
        for (index, chunk) in bytes.chunks(Self::PART_SIZE).enumerate() {
            let number = i32::try_from(index + 1).unwrap_or(i32::MAX);
            let part = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(&upload_id)
                .part_number(number)
                .body(ByteStream::from(chunk.to_vec()))
                .send()
                .await;
            let part = match part {
                Ok(part) => part,
                Err(error) => {
                    let _ = self
                        .client
                        .abort_multipart_upload()
                        .bucket(&self.bucket)
                        .key(key)
                        .upload_id(&upload_id)
                        .send()
                        .await;
                    return Err(s3_error(aws_sdk_s3::error::DisplayErrorContext(error)));
                }
            };
            parts.push(
                aws_sdk_s3::types::CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(part.e_tag().map(str::to_owned))
                    .build(),
            );
        }
        self.client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(&upload_id)
            .multipart_upload(
                aws_sdk_s3::types::CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|error| s3_error(aws_sdk_s3::error::DisplayErrorContext(error)))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        let object =
            self.client
                .get_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
                .map_err(|error| {
                    if error.as_service_error().is_some_and(
                        aws_sdk_s3::operation::get_object::GetObjectError::is_no_such_key,
                    ) {
                        StorageError::NotFound(key.to_owned())
                    } else {
                        s3_error(aws_sdk_s3::error::DisplayErrorContext(error))
                    }
                })?;
        let expected = object
            .metadata()
            .and_then(|metadata| metadata.get("sha256"))
            .cloned();
        let bytes = object
            .body
            .collect()
            .await
            .map_err(s3_error)?
            .into_bytes()
            .to_vec();
        if let Some(expected) = expected {
            let actual = super::sha256_hex(&bytes);
            if actual != expected {
                return Err(s3_error(format!(
                    "{key}: content sha256 {actual} differs from the stored {expected}"
                )));
            }
        }
        Ok(bytes)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|error| s3_error(aws_sdk_s3::error::DisplayErrorContext(error)))?;
        Ok(())
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(head) => Ok(Some(
                head.content_length()
                    .and_then(|length| u64::try_from(length).ok())
                    .unwrap_or(0),
            )),
            Err(error)
                if error.as_service_error().is_some_and(
                    aws_sdk_s3::operation::head_object::HeadObjectError::is_not_found,
                ) =>
            {
                Ok(None)
            }
            Err(error) => Err(s3_error(aws_sdk_s3::error::DisplayErrorContext(error))),
        }
    }

    fn uri(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

/// The configured storage: S3 when an endpoint is set, else a directory.
#[derive(Clone, Debug)]
pub enum Storage {
    Local(LocalDir),
    S3(S3),
}

/// Where artifacts go, as configured (opened with [`Storage::open`]).
#[derive(Clone, Debug)]
pub enum StorageSettings {
    Local(PathBuf),
    S3(S3Settings),
}

impl Storage {
    /// The storage the settings name (builds the S3 client; no I/O yet).
    pub fn open(settings: &StorageSettings) -> Self {
        match settings {
            StorageSettings::Local(root) => Storage::Local(LocalDir::new(root.clone())),
            StorageSettings::S3(settings) => Storage::S3(S3::new(settings)),
        }
    }
}

impl ArtifactStorage for Storage {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), StorageError> {
        match self {
            Storage::Local(local) => local.put(key, bytes).await,
            Storage::S3(s3) => s3.put(key, bytes).await,
        }
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        match self {
            Storage::Local(local) => local.get(key).await,
            Storage::S3(s3) => s3.get(key).await,
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        match self {
            Storage::Local(local) => local.delete(key).await,
            Storage::S3(s3) => s3.delete(key).await,
        }
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match self {
            Storage::Local(local) => local.size(key).await,
            Storage::S3(s3) => s3.size(key).await,
        }
    }

    fn uri(&self, key: &str) -> String {
        match self {
            Storage::Local(local) => local.uri(key),
            Storage::S3(s3) => s3.uri(key),
        }
    }
}
