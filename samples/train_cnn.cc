// Trains a small CNN (conv-relu-pool twice, then linear) on the UCI optical digits
// (data/digits/) with the whole training step as one jit function; the same report as
// train_digits (README "Training").
//
//   ./train_cnn [--sgd|--adam] [--lr LR] [--epochs N] [--autocast bfloat16|float16]
//               [--compare] [--check]
#include "digits_data.h"

int main(int argc, char** argv) {
  try {
    const digits::TrainOptions o = digits::parse_options(argc, argv, 20);
    return digits::train<digits::CNN>("train_cnn (conv 8, conv 16, linear 10)", o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_cnn: %s\n", e.what());
    return 2;
  }
}
