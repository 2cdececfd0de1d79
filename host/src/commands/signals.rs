//! SIGINT and SIGTERM: the first stops the command cleanly, a second exits at once. Uses the
//! library's `pipeline`.

use std::sync::Arc;

/// Calls `stop` on the first SIGINT or SIGTERM; a second one exits at once.
pub(crate) fn on_signals(stop: impl Fn() + Send + 'static) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let (mut interrupt, mut terminate) = {
        let _inside = runtime.enter();
        (
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        )
    };
    std::thread::Builder::new()
        .name("weir-signals".into())
        .spawn(move || {
            runtime.block_on(async {
                for round in 0..2 {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                    if round == 1 {
                        eprintln!("weir: stopping now (the last checkpoint holds)");
                        std::process::exit(130);
                    }
                    eprintln!("weir: stopping after a final checkpoint (again to stop now)");
                    stop();
                }
            })
        })?;
    Ok(())
}

/// SIGINT or SIGTERM stops the run after a final checkpoint (its windows stay open, so a
/// restart goes on where it stopped): how an endless input (stdin, NATS) is ended. A second
/// signal exits at once; the last checkpoint still holds.
pub(crate) fn stop_on_signals(control: Arc<weir::pipeline::PipelineControl>) -> anyhow::Result<()> {
    on_signals(move || control.stop())
}
