//! `--grpc`: the testbed as a gRPC server (h2c), with the HTTP side's
//! knobs given gRPC's words. Admission refuses with `RESOURCE_EXHAUSTED`
//! (the fast 429), a pool wait that times out answers `UNAVAILABLE` (the
//! slow 503), and injected errors are `INTERNAL` (the 500). The same gates
//! and delay ([`Shared`]) serve both sides, so a gRPC run and an HTTP run
//! against the same flags see the same overload shape.
//!
//! It serves reflection (v1 and v1alpha), and counts every answer by
//! status; the counts are printed to stdout when it stops
//! (`grpc-status OK 950`), for tests to hold a report against.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status};

use crate::server::Shared;
use crate::Config;

/// The generated service; its items are `pub` as generated.
#[allow(clippy::all, unreachable_pub)]
pub(crate) mod pb {
    tonic::include_proto!("loadfleet.testbed.v1");
}

/// The encoded descriptor set of the service, for reflection.
const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/testbed_descriptors.bin"));

/// Answers by gRPC status code (0..=16).
struct Counts([AtomicU64; 17]);

impl Counts {
    fn bump(&self, code: Code) {
        if let Some(n) = self.0.get(code as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `grpc-status NAME N` per status answered at least once, in code
    /// order.
    fn lines(&self) -> String {
        let mut out = String::new();
        for (code, n) in self.0.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                let name = name(Code::from(code as i32));
                out.push_str(&format!("grpc-status {name} {n}\n"));
            }
        }
        out
    }
}

/// The canonical name of a status code, as reports spell it.
fn name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

struct Testbed {
    shared: Arc<Shared>,
    counts: Arc<Counts>,
}

impl Testbed {
    async fn work(&self, payload: String) -> Result<pb::WorkReply, Status> {
        // Admission is held while waiting for the pool and while working,
        // and checked first, so refusals are fast: as on the HTTP side.
        let _admitted = match &self.shared.admission {
            Some(gate) => match gate.enter().await {
                Some(permit) => Some(permit),
                None => return Err(Status::resource_exhausted("not admitted")),
            },
            None => None,
        };
        let _slot = match &self.shared.pool {
            Some(gate) => match gate.enter().await {
                Some(permit) => Some(permit),
                None => return Err(Status::unavailable("pool timeout")),
            },
            None => None,
        };
        let delay = self.shared.service_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if self.shared.inject_error() {
            return Err(Status::internal("injected error"));
        }
        Ok(pb::WorkReply { payload })
    }
}

#[tonic::async_trait]
impl pb::testbed_server::Testbed for Testbed {
    async fn work(
        &self,
        request: Request<pb::WorkRequest>,
    ) -> Result<Response<pb::WorkReply>, Status> {
        let answer = Testbed::work(self, request.into_inner().payload).await;
        self.counts.bump(match &answer {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        });
        answer.map(Response::new)
    }
}

/// Serves the gRPC service and reflection on `listener` until `shutdown`
/// completes, then prints the counts.
pub async fn serve(
    listener: TcpListener,
    config: Arc<Config>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let counts = Arc::new(Counts(std::array::from_fn(|_| AtomicU64::new(0))));
    let service = Testbed {
        shared: Arc::new(Shared::new(&config)),
        counts: Arc::clone(&counts),
    };
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTORS)
        .build_v1()
        .context("building the reflection service")?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(DESCRIPTORS)
        .build_v1alpha()
        .context("building the reflection service")?;
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(pb::testbed_server::TestbedServer::new(service))
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
        .context("serving gRPC")?;
    print!("{}", counts.lines());
    Ok(())
}
