'use strict';
module.exports = {
  testEnvironment: 'node',
  testMatch: ['**/__tests__/**/*.test.js'],
  // The conformance run and the GPU tests on a software adapter take a while.
  testTimeout: 120000,
};
