// require('webnn-node/global') installs navigator.ml and the ML* classes
// as globals.
import * as webnn from './index';

declare global {
  interface Navigator {
    readonly ml: webnn.ML;
  }
  // eslint-disable-next-line no-var
  var navigator: Navigator;
  // eslint-disable-next-line no-var
  var ML: typeof webnn.ML;
  // eslint-disable-next-line no-var
  var MLContext: typeof webnn.MLContext;
  // eslint-disable-next-line no-var
  var MLGraphBuilder: typeof webnn.MLGraphBuilder;
  // eslint-disable-next-line no-var
  var MLOperand: typeof webnn.MLOperand;
  // eslint-disable-next-line no-var
  var MLTensor: typeof webnn.MLTensor;
  // eslint-disable-next-line no-var
  var MLGraph: typeof webnn.MLGraph;
}

export = webnn;
