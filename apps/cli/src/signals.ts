// Shutdown on SIGTERM/SIGINT for the long-running commands: the first signal starts a graceful
// stop; a second one exits at once (status 130).

/** Resolves on the first SIGTERM or SIGINT; after that, another such signal exits immediately. */
export function waitForShutdownSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
      const force = (again: NodeJS.Signals) => {
        process.stderr.write(`received ${again} again: exiting without a graceful stop\n`);
        process.exit(130);
      };
      process.on('SIGTERM', force);
      process.on('SIGINT', force);
      resolve(signal);
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}
