// The telemetry probe with the JavaScript SDK (tests/test_guest_telemetry.py; the same probe is
// written with every SDK). Per request: probe_requests_total +1, 2.5 observed in probe_value
// (buckets 1, 10, 100), a span js-work (attribute lang) with a child js-inner that has an event
// step. OUTPUT0 is INPUT0 (the handle renamed).
import { InferenceResponse, MetricFamily, Span, Tensor } from './tessera.js';

export class TritonPythonModel {
  initialize() {
    const counter = new MetricFamily('probe_requests_total', 'Requests the probe saw', MetricFamily.COUNTER);
    const histogram = new MetricFamily('probe_value', 'Values the probe observed', MetricFamily.HISTOGRAM);
    this.requests = counter.Metric({ lang: 'js' });
    this.values = histogram.Metric({ lang: 'js' }, [1, 10, 100]);
  }

  execute(requests) {
    return requests.map((request) => {
      const span = new Span('js-work');
      span.setAttribute('lang', 'js');
      const inner = new Span('js-inner', span);
      inner.addEvent('step', { n: 1 });
      inner.end();
      this.requests.increment(1);
      this.values.observe(2.5);
      span.end();
      return new InferenceResponse({ outputTensors: [new Tensor('OUTPUT0', request.input('INPUT0'))] });
    });
  }
}
