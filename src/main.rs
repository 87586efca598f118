use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = execplane::cli::Cli::parse();
    // The tool supervisor is synchronous and must not start a runtime's
    // threads or read any configuration: its environment is the tool's.
    if let execplane::cli::Command::ToolShim {
        workdir,
        hold_stdin,
        command,
    } = &cli.command
    {
        return execplane::runner::tool::shim::run(workdir.as_deref(), *hold_stdin, command);
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
    match runtime.block_on(execplane::cli::run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}
