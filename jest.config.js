'use strict';
module.exports = {
  testEnvironment: 'node',
  testMatch: ['**/__tests__/**/*.test.js'],
  // The conformance run and the GPU tests on a software adapter take a while.
  testTimeout: 120000,
  // The platform package's folder holds a prebuilt addon of whatever
  // `npm run prebuild` last made: tests load the addon built from this
  // checkout, as Node itself does when that package is not installed.
  modulePathIgnorePatterns: ['<rootDir>/npm/', '<rootDir>/dist/'],
};
