//! Real OVS/OVN daemons for the tests that compare with them (filled in by part 2).
