"""One module per seed framework (../shared/seeds/): each example of its checkpoint
documentation, done with snapvc's API, asserting the outcomes the documentation states."""
