// The one Catch2 main shared by every unit-test program (keeps each test
// program's link small and its sources free of main()).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
