// rpc.server.duration for every call on the public gRPC port (the OpenShell API and the
// supervisor protocol), streaming calls included: a server interceptor sees each call's final
// status whichever way the handler ends it (callback, 'error' event, end()), and a cancel by the
// client (no status is sent then: recorded as CANCELLED).
import { ServerInterceptingCall, ServerListenerBuilder, ResponderBuilder, status as Status, type ServerInterceptor } from '@grpc/grpc-js';
import type { Metrics } from '@sandgate/telemetry';

export function rpcMetricsInterceptor(metrics: Metrics): ServerInterceptor {
  return (method, call) => {
    const started = performance.now();
    // path is '/package.Service/Method'.
    const slash = method.path.lastIndexOf('/');
    const service = method.path.slice(1, slash);
    const name = method.path.slice(slash + 1);
    let recorded = false;
    const record = (code: number) => {
      if (recorded) return;
      recorded = true;
      metrics.record('rpc.server.duration', performance.now() - started, {
        'rpc.system': 'grpc',
        'rpc.service': service,
        'rpc.method': name,
        'rpc.grpc.status_code': String(code),
      });
    };
    return new ServerInterceptingCall(
      call,
      new ResponderBuilder()
        .withStart((next) => next(new ServerListenerBuilder().withOnCancel(() => record(Status.CANCELLED)).build()))
        .withSendStatus((s, next) => {
          record(s.code ?? Status.UNKNOWN);
          next(s);
        })
        .build(),
    );
  };
}
