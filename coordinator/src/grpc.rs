//! Asking a gRPC target's reflection service for the message types of the
//! methods a plan calls, before any load is sent (`[target] reflection =
//! true`, `--reflection`). Both the `grpc.reflection.v1` service and the
//! older `v1alpha` one that many servers still serve are spoken: v1 first,
//! v1alpha when the server does not implement v1.
//!
//! The answer is the files that define each service with everything they
//! import, gathered into one `FileDescriptorSet`: exactly what a descriptor
//! set file would hold, so the rest of the run cannot tell the two apart.

use std::collections::BTreeSet;
use std::time::Duration;

use loadfleet_proto::bounds::MAX_GRPC_DESCRIPTORS_BYTES;
use prost::Message;
use prost_types::{FileDescriptorProto, FileDescriptorSet};

/// Most files one reflection exchange may bring: a few services with their
/// imports are a handful; a server that keeps answering is cut off.
const MAX_FILES: usize = 1000;

/// Why the message types could not be had from the target.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReflectionError {
    /// No gRPC connection to the target.
    #[error("cannot reach {url} for reflection: {reason}")]
    Connect {
        /// The target.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The server serves neither reflection service.
    #[error("{url} serves no reflection service (neither grpc.reflection.v1 nor v1alpha); give the message types as a descriptor set instead (descriptor_set = \"FILE\" in [target], or --descriptor-set FILE)")]
    Unimplemented {
        /// The target.
        url: String,
    },
    /// The reflection call failed, or answered something unusable.
    #[error("reflection at {url}: {reason}")]
    Failed {
        /// The target.
        url: String,
        /// What went wrong.
        reason: String,
    },
}

/// The message types of `services` (fully qualified names), from the
/// reflection service of the gRPC server at `url`, as an encoded
/// `FileDescriptorSet`. Gives up after `timeout`.
pub(crate) async fn reflect(
    url: &str,
    services: &[String],
    timeout: Duration,
) -> Result<Vec<u8>, ReflectionError> {
    let failed = |reason: String| ReflectionError::Failed {
        url: url.to_string(),
        reason,
    };
    let work = async {
        let channel = connect(url).await?;
        match v1::files(channel.clone(), services).await {
            Err(Asked::Unimplemented) => match v1alpha::files(channel, services).await {
                Err(Asked::Unimplemented) => Err(ReflectionError::Unimplemented {
                    url: url.to_string(),
                }),
                Err(Asked::Failed(reason)) => Err(failed(reason)),
                Ok(files) => Ok(files),
            },
            Err(Asked::Failed(reason)) => Err(failed(reason)),
            Ok(files) => Ok(files),
        }
    };
    let files = tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| failed(format!("no complete answer within {}s", timeout.as_secs())))??;
    Ok(FileDescriptorSet { file: files }.encode_to_vec())
}

async fn connect(url: &str) -> Result<tonic::transport::Channel, ReflectionError> {
    let connect_failed = |reason: String| ReflectionError::Connect {
        url: url.to_string(),
        reason,
    };
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| connect_failed(e.to_string()))?
        .connect_timeout(Duration::from_secs(5));
    if url.starts_with("https://") {
        endpoint = endpoint
            .tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots())
            .map_err(|e| connect_failed(e.to_string()))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| connect_failed(format!("{e} ({})", source_chain(&e))))
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    parts.join(": ")
}

/// What one reflection service version made of the question.
enum Asked {
    /// The server does not serve this version.
    Unimplemented,
    Failed(String),
}

/// The files gathered so far, and what is still to ask.
#[derive(Default)]
struct Gathered {
    files: Vec<FileDescriptorProto>,
    names: BTreeSet<String>,
    bytes: usize,
}

impl Gathered {
    /// Adds the encoded files of one answer; returns the imports not yet
    /// held.
    fn add(&mut self, encoded: &[Vec<u8>]) -> Result<Vec<String>, String> {
        for bytes in encoded {
            self.bytes += bytes.len();
            if self.bytes > MAX_GRPC_DESCRIPTORS_BYTES || self.files.len() >= MAX_FILES {
                return Err(format!(
                    "the server's descriptors exceed {MAX_GRPC_DESCRIPTORS_BYTES} bytes or {MAX_FILES} files"
                ));
            }
            let file = FileDescriptorProto::decode(bytes.as_slice())
                .map_err(|e| format!("an answered file descriptor does not decode: {e}"))?;
            if self.names.insert(file.name().to_string()) {
                self.files.push(file);
            }
        }
        let missing = self
            .files
            .iter()
            .flat_map(|f| f.dependency.iter())
            .filter(|d| !self.names.contains(*d))
            .cloned()
            .collect::<BTreeSet<_>>();
        Ok(missing.into_iter().collect())
    }
}

/// One module per reflection version: the generated types differ, the
/// exchange is the same. Each question goes out on its own stream, one
/// answer back, so a server that answers out of order cannot confuse it.
macro_rules! reflection_version {
    ($name:ident, $pb:path) => {
        mod $name {
            use super::{Asked, Gathered};
            use pb::server_reflection_client::ServerReflectionClient;
            use pb::server_reflection_request::MessageRequest;
            use pb::server_reflection_response::MessageResponse;
            use tonic::Code;
            use $pb as pb;

            async fn ask(
                client: &mut ServerReflectionClient<tonic::transport::Channel>,
                request: MessageRequest,
            ) -> Result<Vec<Vec<u8>>, Asked> {
                let question = pb::ServerReflectionRequest {
                    host: String::new(),
                    message_request: Some(request),
                };
                let mut answers = client
                    .server_reflection_info(tokio_stream::once(question))
                    .await
                    .map_err(|s| match s.code() {
                        Code::Unimplemented => Asked::Unimplemented,
                        _ => Asked::Failed(s.message().to_string()),
                    })?
                    .into_inner();
                let answer = answers
                    .message()
                    .await
                    .map_err(|s| match s.code() {
                        Code::Unimplemented => Asked::Unimplemented,
                        _ => Asked::Failed(s.message().to_string()),
                    })?
                    .ok_or_else(|| {
                        Asked::Failed("the server closed the stream without an answer".into())
                    })?;
                match answer.message_response {
                    Some(MessageResponse::FileDescriptorResponse(files)) => {
                        Ok(files.file_descriptor_proto)
                    }
                    Some(MessageResponse::ErrorResponse(e)) => Err(Asked::Failed(format!(
                        "{} (code {})",
                        e.error_message, e.error_code
                    ))),
                    _ => Err(Asked::Failed(
                        "an answer that is not a file descriptor".into(),
                    )),
                }
            }

            pub(super) async fn files(
                channel: tonic::transport::Channel,
                services: &[String],
            ) -> Result<Vec<prost_types::FileDescriptorProto>, Asked> {
                let mut client = ServerReflectionClient::new(channel)
                    .max_decoding_message_size(loadfleet_proto::bounds::MAX_GRPC_DESCRIPTORS_BYTES);
                let mut gathered = Gathered::default();
                let mut missing = Vec::new();
                for service in services {
                    let found = ask(
                        &mut client,
                        MessageRequest::FileContainingSymbol(service.clone()),
                    )
                    .await
                    .map_err(|e| match e {
                        Asked::Failed(why) => Asked::Failed(format!("service {service:?}: {why}")),
                        other => other,
                    })?;
                    missing = gathered.add(&found).map_err(Asked::Failed)?;
                }
                let mut asked = std::collections::BTreeSet::new();
                while let Some(name) = missing.pop() {
                    if !asked.insert(name.clone()) {
                        return Err(Asked::Failed(format!(
                            "the server does not give the imported file {name:?}"
                        )));
                    }
                    let found = ask(&mut client, MessageRequest::FileByFilename(name.clone()))
                        .await
                        .map_err(|e| match e {
                            Asked::Failed(why) => {
                                Asked::Failed(format!("imported file {name:?}: {why}"))
                            }
                            other => other,
                        })?;
                    missing = gathered.add(&found).map_err(Asked::Failed)?;
                }
                Ok(gathered.files)
            }
        }
    };
}

reflection_version!(v1, tonic_reflection::pb::v1);
reflection_version!(v1alpha, tonic_reflection::pb::v1alpha);
