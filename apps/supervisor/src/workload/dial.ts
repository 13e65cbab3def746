// How the supervisor opens a TCP connection to a loopback port *of the sandbox* (ForwardTcp tcp
// targets, ssh -L). With an isolated network the sandbox's loopback is not the supervisor's, so
// the connection is made by the netns agent inside the workload's namespace; without one it is a
// plain connect. Either way the caller gets a connected socket or an error, never a socket that
// dies later because the target refused.
import net from 'node:net';

/** Connects to a loopback `host:port` of the sandbox. */
export type Dialer = (host: string, port: number, timeoutMs: number) => Promise<net.Socket>;

export const directDial: Dialer = (host, port, timeoutMs) =>
  new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    const timer = setTimeout(() => socket.destroy(new Error('connect timed out')), timeoutMs);
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
  });
