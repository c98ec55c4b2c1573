// Shared by the test kernels and the tests that build their requests: every test
// kernel takes buffers (A, B, C) of kTestElements floats each, C the OUTPUT.
#pragma once

enum { kTestElements = 4096 };
