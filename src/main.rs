use std::process::ExitCode;

use clap::Parser;

/// glibc's allocator was a tenth of the machine's CPU under load (its
/// free lists, consolidation and locks; docs/BENCHMARKS.md); mimalloc's
/// per-thread heaps cost a fraction of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = execplane::cli::Cli::parse();
    // The tool supervisor is synchronous and must not start a runtime's
    // threads or read any configuration: its environment is the tool's.
    if let execplane::cli::Command::ToolShim {
        workdir,
        hold_stdin,
        uid,
        cgroup,
        command,
    } = &cli.command
    {
        let options = execplane::runner::tool::shim::Options {
            workdir: workdir.as_deref(),
            hold_stdin: *hold_stdin,
            uid: *uid,
            cgroups: cgroup,
        };
        return execplane::runner::tool::shim::run(&options, command);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(70);
        }
    };
    let outcome = runtime.block_on(execplane::cli::run(cli));
    // A blocking call still in flight (a metadata request to a broker that
    // is away, say) holds the exit this long at most, not until it ends.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    execplane::telemetry::finish();
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}
